//! Errors answered to clients (`ApiError`: status and a message that says what to fix),
//! JSON bodies parsed so that a failure names the field, and the bounded body readers
//! (`RequestBody`, and `JsonBody` for the Sentry API's JSON endpoints).

use axum::Json;
use axum::extract::{DefaultBodyLimit, FromRef, FromRequest, Request};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Serialize;

use super::limits::RequestRefused;
use super::listen::BodyTimeout;

/// An error answered to the client, with a message that says what to fix.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: &'a str,
}

impl ApiError {
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
        }
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: message.into(),
        }
    }

    /// A failure on our side; the detail was logged where it happened.
    pub fn internal() -> Self {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: "internal error".into(),
        }
    }

    /// A body whose lists pass the request limits, or that hides them.
    pub fn refused(refused: RequestRefused) -> Self {
        match refused {
            RequestRefused::TooMany { .. } => {
                Self::bad_request(format!("request too large: {refused}"))
            }
            RequestRefused::NotAnObject(_) => {
                Self::bad_request(format!("invalid JSON body: {refused}"))
            }
        }
    }

    /// A body that failed while it was read: too slow (408, which also ends the
    /// connection, as the rest of the body is never read), too large, or cut off.
    pub fn body_failed(
        err: &(dyn std::error::Error + 'static),
        status: StatusCode,
        text: String,
    ) -> Self {
        let mut source = Some(err);
        while let Some(err) = source {
            if let Some(timeout) = err.downcast_ref::<BodyTimeout>() {
                return ApiError {
                    status: StatusCode::REQUEST_TIMEOUT,
                    message: timeout.to_string(),
                };
            }
            source = err.source();
        }
        ApiError {
            status,
            message: text,
        }
    }

    pub fn overloaded() -> Self {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: "maximum number of concurrent requests reached".into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(ErrorBody {
                error: &self.message,
            }),
        )
            .into_response()
    }
}

/// Parses a JSON body, naming the offending field on failure (`modules[0].image_addr:
/// invalid address "zz"`), which serde_json alone does not.
pub fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    // Tracking the path costs on every value parsed; only an error needs it, so a
    // body that parses is parsed once without it, and a bad one again with it.
    if let Ok(value) = serde_json::from_slice(body) {
        return Ok(value);
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        if path.is_empty() || path == "." {
            ApiError::bad_request(format!("invalid JSON body: {inner}"))
        } else {
            ApiError::bad_request(format!("invalid JSON body: field `{path}`: {inner}"))
        }
    })?;
    de.end()
        .map_err(|err| ApiError::bad_request(format!("invalid JSON body: {err}")))?;
    Ok(value)
}

/// The most bytes a body read whole may have (`max_request_body_size`).
#[derive(Clone, Copy, Debug)]
pub struct BodyLimit(pub usize);

/// The whole body of a request, read under the body size limit and `body_read_timeout`.
pub struct RequestBody(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for RequestBody
where
    BodyLimit: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request(mut req: Request, state: &S) -> Result<Self, ApiError> {
        // Set here, by the one extractor that reads a body whole, rather than by a
        // `DefaultBodyLimit` layer: a layer costs every request of every route, GETs
        // included, an extension and a boxed service more.
        DefaultBodyLimit::max(BodyLimit::from_ref(state).0).apply(&mut req);
        Bytes::from_request(req, state)
            .await
            .map(RequestBody)
            .map_err(|rejection| {
                ApiError::body_failed(&rejection, rejection.status(), rejection.body_text())
            })
    }
}

/// The body of one of the Sentry API's JSON endpoints (`/symbolicate`,
/// `/symbolicate-js`, ...), read as [`RequestBody`] once its `Content-Type` says JSON:
/// anything else, or none, is 415 before the body is read, as upstream's `Json`
/// extractor answers. So a page cannot make the server work (and fetch from the sources
/// the page names) with a blind cross-site form post: a form sends
/// `application/x-www-form-urlencoded`, `multipart/form-data` or `text/plain`, and a
/// page's JSON needs a CORS preflight, which these endpoints never allow.
pub struct JsonBody(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for JsonBody
where
    BodyLimit: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        if !is_json(req.headers()) {
            return Err(ApiError {
                status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
                message: "expected a JSON body (`Content-Type: application/json`)".into(),
            });
        }
        RequestBody::from_request(req, state)
            .await
            .map(|RequestBody(body)| JsonBody(body))
    }
}

/// `application/json` or `application/<anything>+json`, with or without parameters:
/// what axum's `Json` extractor takes.
fn is_json(headers: &HeaderMap) -> bool {
    let Some(mime) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<mime::Mime>().ok())
    else {
        return false;
    };
    mime.type_() == mime::APPLICATION
        && (mime.subtype() == mime::JSON || mime.suffix() == Some(mime::JSON))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_what_axum_json_takes() {
        let typed = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::CONTENT_TYPE, value.parse().unwrap());
            is_json(&headers)
        };
        for json in [
            "application/json",
            "application/json; charset=utf-8",
            "application/json;charset=utf-8",
            "Application/JSON",
            "application/cloudevents+json",
        ] {
            assert!(typed(json), "{json}");
        }
        for other in [
            "text/plain",
            "text/json",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/jsonx",
            "application/octet-stream",
            "json",
            "",
        ] {
            assert!(!typed(other), "{other}");
        }
        assert!(!is_json(&HeaderMap::new()), "no Content-Type");
    }
}
