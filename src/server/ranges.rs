//! Answering a file the fronts serve (`/proxy`, debuginfod, SymCache over HTTP) whole
//! or, for one `Range`, in part. Debuggers and symbol servers ask for parts of a large
//! file (a PDB's stream, a resumed download), and a file past 4 GiB is common among
//! them: every offset and length here is a `u64`.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_range_header::RangeUnsatisfiableError;

/// `body` as the answer to a `GET` or `HEAD` with `request`'s headers: `206` with
/// `Content-Range` for one satisfiable range, `416` for a range past the end, else the
/// whole file. Several ranges get the whole file, as RFC 9110 allows a server to answer
/// (no client of ours asks for a multipart answer). The caller adds `Content-Type`.
pub fn ranged(method: &Method, request: &HeaderMap, body: Bytes) -> Response {
    let size = body.len() as u64;
    let (status, part, content_range) = match wanted(request, size) {
        Wanted::Whole => (StatusCode::OK, body, None),
        Wanted::Part(start, end) => {
            // `end` < `size` = `body.len()`: the range was validated against it.
            let part = body.slice(to_index(start)..=to_index(end));
            let range = format!("bytes {start}-{end}/{size}");
            (StatusCode::PARTIAL_CONTENT, part, Some(range))
        }
        Wanted::Unsatisfiable => {
            let mut response = StatusCode::RANGE_NOT_SATISFIABLE.into_response();
            let headers = response.headers_mut();
            headers.insert(header::CONTENT_RANGE, value(format!("bytes */{size}")));
            headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
            return response;
        }
    };
    let length = part.len() as u64;
    let body = if method == Method::HEAD {
        Body::empty()
    } else {
        Body::from(part)
    };
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    // Set by hand: a `HEAD`'s empty body would otherwise claim a length of 0.
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    if let Some(range) = content_range {
        headers.insert(header::CONTENT_RANGE, value(range));
    }
    response
}

enum Wanted {
    Whole,
    /// First and last byte, both within the file.
    Part(u64, u64),
    Unsatisfiable,
}

fn wanted(request: &HeaderMap, size: u64) -> Wanted {
    // The answers carry no validator (`ETag`, `Last-Modified`) an `If-Range` could
    // match, so a conditional range gets the whole file (RFC 9110, 13.1.5).
    if request.contains_key(header::IF_RANGE) {
        return Wanted::Whole;
    }
    let Some(range) = request.get(header::RANGE) else {
        return Wanted::Whole;
    };
    // A header that is no byte range (another unit, bad syntax) is ignored, as RFC 9110
    // asks; one that names bytes past the end cannot be served.
    let Some(parsed) = range
        .to_str()
        .ok()
        .and_then(|text| http_range_header::parse_range_header(text).ok())
    else {
        return Wanted::Whole;
    };
    if parsed.ranges.len() != 1 {
        return Wanted::Whole;
    }
    match parsed.validate(size).as_deref() {
        Ok([only]) if size > 0 => Wanted::Part(*only.start(), *only.end()),
        // A suffix longer than the file asks for all of it.
        Err(RangeUnsatisfiableError::FileSuffixOutOfBounds) => Wanted::Whole,
        _ => Wanted::Unsatisfiable,
    }
}

fn to_index(offset: u64) -> usize {
    usize::try_from(offset).expect("an offset within a mapped file fits usize")
}

fn value(text: String) -> HeaderValue {
    HeaderValue::try_from(text).expect("digits, spaces, '-', '/' and '*' are a header value")
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn answer(range: Option<&str>, body: &'static [u8]) -> (StatusCode, HeaderMap, Vec<u8>) {
        let mut request = HeaderMap::new();
        if let Some(range) = range {
            request.insert(header::RANGE, HeaderValue::from_str(range).unwrap());
        }
        let response = ranged(&Method::GET, &request, Bytes::from_static(body));
        let (parts, body) = response.into_parts();
        let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
        (parts.status, parts.headers, bytes.to_vec())
    }

    #[tokio::test]
    async fn one_range_is_served_in_part_and_others_whole_or_refused() {
        let (status, headers, body) = answer(Some("bytes=2-4"), b"0123456789").await;
        assert_eq!(status, StatusCode::PARTIAL_CONTENT);
        assert_eq!(body, b"234");
        assert_eq!(headers[header::CONTENT_RANGE], "bytes 2-4/10");
        assert_eq!(headers[header::CONTENT_LENGTH], "3");

        let (_, headers, body) = answer(Some("bytes=-3"), b"0123456789").await;
        assert_eq!(body, b"789");
        assert_eq!(headers[header::CONTENT_RANGE], "bytes 7-9/10");
        let (_, _, body) = answer(Some("bytes=8-"), b"0123456789").await;
        assert_eq!(body, b"89");
        // Past the end: the end is the file's.
        let (_, _, body) = answer(Some("bytes=8-100"), b"0123456789").await;
        assert_eq!(body, b"89");
        let (status, _, body) = answer(Some("bytes=-20"), b"0123456789").await;
        assert_eq!((status, &body[..]), (StatusCode::OK, &b"0123456789"[..]));

        let (status, headers, _) = answer(Some("bytes=10-"), b"0123456789").await;
        assert_eq!(status, StatusCode::RANGE_NOT_SATISFIABLE);
        assert_eq!(headers[header::CONTENT_RANGE], "bytes */10");

        for ignored in [
            None,
            Some("bytes=0-1,4-5"),
            Some("lines=1-2"),
            Some("bytes=x"),
        ] {
            let (status, headers, body) = answer(ignored, b"0123456789").await;
            assert_eq!(status, StatusCode::OK, "{ignored:?}");
            assert_eq!(body, b"0123456789");
            assert_eq!(headers[header::ACCEPT_RANGES], "bytes");
        }
    }
}
