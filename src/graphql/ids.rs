//! Id arguments as the typed ids they must be: an id that cannot name anything names
//! nothing, and is answered as an unknown one is.

use async_graphql::ID;

use super::error::Result;
use crate::error::ApiError;
use crate::model::ids::{DestinationId, EndpointId, SubmissionId};

pub(super) fn endpoint_or_not_found(id: &ID) -> Result<EndpointId> {
    Ok(
        EndpointId::parse(id).ok_or_else(|| ApiError::EndpointNotFound {
            endpoint_id: id.0.clone(),
        })?,
    )
}

pub(super) fn destination_or_not_found(id: &ID) -> Result<DestinationId> {
    Ok(
        DestinationId::parse(id).ok_or_else(|| ApiError::DestinationNotFound {
            destination_id: id.0.clone(),
        })?,
    )
}

pub(super) fn submission_or_not_found(id: &ID) -> Result<SubmissionId> {
    Ok(
        SubmissionId::parse(id).ok_or_else(|| ApiError::SubmissionNotFound {
            submission_id: id.0.clone(),
        })?,
    )
}
