// What an error from the API means, in words. The API's own messages are already
// sentences; a few codes get a phrasing that says what to do in the console instead.

const PHRASES = {
  AUTHENTICATION_REQUIRED: "Sign in with a management key.",
  INVALID_API_KEY:
    "That key was refused: it is unknown, mistyped or revoked. Keys are made with `hymical-forms keys create`.",
  ENDPOINT_ALREADY_EXISTS: "An endpoint with this id exists already; choose another id.",
  ENDPOINT_DELETED:
    "This endpoint was deleted and its history is kept, so its id stays taken; erase that history to reuse the id.",
  ENDPOINT_HAS_DELIVERIES_IN_PROGRESS:
    "It still has deliveries waiting or in flight: tick “Cancel its deliveries still waiting or in flight” to delete it anyway, or wait until they are done.",
  RATE_LIMIT_EXCEEDED: "Too many requests just now; wait a moment and try again.",
  STORAGE_UNAVAILABLE: "The server cannot reach its database right now; try again shortly.",
  INTERNAL_ERROR: "The server failed to answer this; its log has the details.",
  QUERY_TOO_COMPLEX: "The server refused the request as too expensive; narrow the filters.",
  EVENT_HISTORY_EXPIRED: "Live updates were interrupted for too long; the view was reloaded.",
  TOO_MANY_EXPORTS: "Other exports are running; try again when they have finished.",
  PROJECT_NOT_FOUND:
    "No project this key sees has that id: it may have been deleted. Choose another project in the header.",
  KEY_NOT_FOUND: "This key manages no key with that id (any more); the list was reloaded.",
  EMAIL_NOT_CONFIGURED:
    "This server has no mail server to send email through: set FORMS_SMTP_HOST (and the other FORMS_SMTP_* settings) and restart it to add email destinations.",
};

// An error carrying the API's code and its sentence.
export class ApiError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

export function explain(error) {
  if (error instanceof ApiError) {
    return PHRASES[error.code] || error.message || "The request failed.";
  }
  if (error instanceof TypeError) {
    return "The server cannot be reached. Is it running?";
  }
  return (error && error.message) || "Something went wrong.";
}

export function isKeyRefused(error) {
  return (
    error instanceof ApiError &&
    (error.code === "INVALID_API_KEY" || error.code === "AUTHENTICATION_REQUIRED")
  );
}

// From GraphQL's error list (or a REST error body) to one ApiError.
export function fromGraphqlErrors(errors) {
  const first = errors[0] || {};
  const code = (first.extensions && first.extensions.code) || "GRAPHQL_ERROR";
  return new ApiError(code, first.message || "The request was refused.");
}

export function fromRestError(status, body) {
  const error = body && body.error;
  if (error && error.code) return new ApiError(error.code.toUpperCase(), error.message);
  return new ApiError(`HTTP_${status}`, `The server answered ${status}.`);
}
