//! CSV of submissions: RFC 4180 with CRLF, one column per field name, each cell the
//! compact JSON array of the field's values (empty when the field is absent), and a guard
//! against spreadsheet formulas on every cell, headers included.

use crate::clock::format_timestamp;
use crate::db::models::SubmissionRow;

/// A cell that a spreadsheet would run as a formula gets a leading `'`.
pub fn guard(cell: &str) -> String {
    match cell.chars().next() {
        Some('=' | '+' | '-' | '@' | '\t' | '\r') => format!("'{cell}"),
        _ => cell.to_string(),
    }
}

fn writer() -> csv::Writer<Vec<u8>> {
    csv::WriterBuilder::new()
        .terminator(csv::Terminator::CRLF)
        .quote_style(csv::QuoteStyle::Necessary)
        .from_writer(Vec::new())
}

// Writing into memory cannot fail, and every record has the header's width (the header
// is written from the same names), so the csv writer's errors cannot happen here.
const IN_MEMORY: &str = "a csv record written into memory";

fn finish(writer: csv::Writer<Vec<u8>>) -> Vec<u8> {
    writer.into_inner().expect(IN_MEMORY)
}

/// The header line, and the field names in column order.
pub fn header(names: &[String]) -> (Vec<u8>, Vec<String>) {
    let mut writer = writer();
    let cells = ["submission_id", "endpoint_id", "received_at"]
        .into_iter()
        .map(str::to_string)
        .chain(names.iter().cloned())
        .map(|cell| guard(&cell));
    writer.write_record(cells).expect(IN_MEMORY);
    (finish(writer), names.to_vec())
}

pub fn rows(rows: &[SubmissionRow], names: &[String]) -> Vec<u8> {
    let mut writer = writer();
    for row in rows {
        let mut cells = vec![
            guard(row.id.as_str()),
            guard(row.endpoint_id.as_str()),
            guard(&format_timestamp(row.received_at)),
        ];
        for name in names {
            let cell = row
                .fields
                .get(name)
                .map(|values| serde_json::to_string(values).expect("a list of strings is JSON"))
                .unwrap_or_default();
            cells.push(guard(&cell));
        }
        writer.write_record(&cells).expect(IN_MEMORY);
    }
    finish(writer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    #[test]
    fn escaping_and_formula_guard() {
        let (head, names) = header(&["=cmd".into(), "name".into(), "note, \"quoted\"".into()]);
        assert_eq!(
            String::from_utf8(head).unwrap(),
            "submission_id,endpoint_id,received_at,'=cmd,name,\"note, \"\"quoted\"\"\"\r\n"
        );
        let row = SubmissionRow {
            id: crate::model::ids::SubmissionId::parse(&format!("sub_{}", "1".repeat(32))).unwrap(),
            endpoint_id: crate::model::ids::EndpointId::parse("contact").unwrap(),
            received_at: Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap(),
            fields: serde_json::json!({"name": [""], "=cmd": ["=1+1", "Zoë\nline"]}),
            idempotency_key: None,
            spam: false,
            spam_reasons: Vec::new(),
            spam_reviewed_at: None,
        };
        let out = String::from_utf8(rows(&[row], &names)).unwrap();
        assert_eq!(
            out,
            "sub_11111111111111111111111111111111,contact,2026-01-02T03:04:05.000000Z,\"[\"\"=1+1\"\",\"\"Zoë\\nline\"\"]\",\"[\"\"\"\"]\",\r\n"
        );
        assert_eq!(guard("+1"), "'+1");
        assert_eq!(guard("-1"), "'-1");
        assert_eq!(guard("@x"), "'@x");
        assert_eq!(guard("\tx"), "'\tx");
        assert_eq!(guard("\rx"), "'\rx");
        assert_eq!(guard("x=1"), "x=1");
    }
}
