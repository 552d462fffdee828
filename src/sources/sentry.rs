//! Sentry's own debug-file store, as upstream's `SentrySourceConfig`: files are found by
//! asking Sentry's debug-file search endpoint, not by directory layout.

use serde::{Deserialize, Deserializer, Serialize};
use url::Url;

use super::common::{DigestCells, SourceId, url_as_string};
use super::filetype::FileType;
use super::secret::Secret;
use super::types::ObjectId;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SentrySourceConfig {
    pub id: SourceId,
    /// The project's debug-file endpoint; searched with `?debug_id=`, downloaded with `?id=`.
    #[serde(with = "url_as_string")]
    pub url: Url,
    /// Sent as `Authorization: Bearer`.
    pub token: Secret,
    /// This config's digests, computed on first use (see `SourceConfig::fingerprint`).
    #[serde(skip)]
    pub digests: DigestCells,
}

impl SentrySourceConfig {
    /// The search URL for `id`, or `None` when the object has neither id: a search without
    /// either would list every file of the project.
    ///
    /// As upstream (and Sentry itself), the code id is only used without a debug id.
    pub fn search_url(&self, id: &ObjectId, filetypes: &[FileType]) -> Option<Url> {
        let mut url = self.url.clone();
        {
            let mut query = url.query_pairs_mut();
            match (&id.debug_id, &id.code_id) {
                (Some(debug_id), _) => query.append_pair("debug_id", &debug_id.to_string()),
                (None, Some(code_id)) => query.append_pair("code_id", code_id.as_str()),
                (None, None) => return None,
            };
            for filetype in filetypes {
                query.append_pair("file_formats", filetype.as_str());
            }
        }
        Some(url)
    }

    /// Where the file with Sentry's id `file_id` is downloaded from.
    pub fn download_url(&self, file_id: &str) -> Url {
        let mut url = self.url.clone();
        url.query_pairs_mut().append_pair("id", file_id);
        url
    }

    /// Whether `next` may be sent this source's token: only same-origin pagination links
    /// are followed, so a forged `Link` header cannot send the token elsewhere.
    pub fn same_origin(&self, next: &Url) -> bool {
        self.url.origin() == next.origin()
    }
}

/// The location shown in candidate reports, as upstream writes it.
pub fn sentry_file_uri(file_id: &str) -> String {
    format!("sentry://project_debug_file/{file_id}")
}

/// One entry of a search answer. Sentry sends much more (`debugId`, `symbolType`, `size`,
/// ...); like upstream, only the id is used, the file itself is judged after download.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct SentryFileInfo {
    #[serde(deserialize_with = "string_or_number")]
    pub id: String,
}

fn string_or_number<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Id {
        Text(String),
        Number(u64),
    }
    Ok(match Id::deserialize(d)? {
        Id::Text(s) => s,
        Id::Number(n) => n.to_string(),
    })
}

/// The files one page of a search answer lists: a JSON list of file objects.
pub fn parse_search_answer(body: &[u8]) -> Result<Vec<SentryFileInfo>, serde_json::Error> {
    serde_json::from_slice(body)
}

/// The next page of a paginated Sentry answer, from its `Link` header:
/// `<url>; rel="next"; results="true"; cursor="..."`. Sentry always sends a `next` link and
/// marks with `results="false"` that it is empty.
pub fn next_page(link_header: &str) -> Option<&str> {
    link_header.split(',').find_map(|link| {
        let (target, params) = link.trim().split_once(';')?;
        let target = target.trim().strip_prefix('<')?.strip_suffix('>')?;
        let mut rel_next = false;
        let mut results = false;
        for param in params.split(';') {
            let Some((key, value)) = param.split_once('=') else {
                continue;
            };
            let value = value.trim().trim_matches('"');
            match key.trim() {
                "rel" => rel_next = value == "next",
                "results" => results = value == "true",
                _ => {}
            }
        }
        (rel_next && results).then_some(target)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::SourceConfig;

    fn source() -> SentrySourceConfig {
        let json = r#"{"type": "sentry", "id": "sentry:project",
            "url": "https://sentry.example/api/0/projects/o/p/files/dsyms/", "token": "sekrit",
            "name": "ignored"}"#;
        match serde_json::from_str::<SourceConfig>(json).unwrap() {
            SourceConfig::Sentry(c) => (*c).clone(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn urls_like_upstream() {
        let s = source();
        assert_eq!(
            s.download_url("abc123").as_str(),
            "https://sentry.example/api/0/projects/o/p/files/dsyms/?id=abc123"
        );
        assert_eq!(
            sentry_file_uri("abc123"),
            "sentry://project_debug_file/abc123"
        );
        let id = ObjectId {
            debug_id: Some("d96fdc6c-1668-6d8a-e479-531b3d99327b".parse().unwrap()),
            code_id: Some("6cdc6fd9".parse().unwrap()),
            ..ObjectId::default()
        };
        assert_eq!(
            s.search_url(&id, &[FileType::ElfDebug, FileType::Breakpad])
                .unwrap()
                .query(),
            Some(
                "debug_id=d96fdc6c-1668-6d8a-e479-531b3d99327b&file_formats=elf_debug&file_formats=breakpad"
            )
        );
        let code_only = ObjectId {
            code_id: Some("6cdc6fd9".parse().unwrap()),
            ..ObjectId::default()
        };
        assert_eq!(
            s.search_url(&code_only, &[]).unwrap().query(),
            Some("code_id=6cdc6fd9")
        );
        assert!(s.search_url(&ObjectId::default(), &[]).is_none());
    }

    #[test]
    fn token_stays_hidden() {
        let s = source();
        assert_eq!(s.token.expose(), "sekrit");
        let shown = format!("{s:?} {}", serde_json::to_string(&s).unwrap());
        assert!(!shown.contains("sekrit"), "{shown}");
    }

    #[test]
    fn pagination_links() {
        let header = r#"<https://s.example/x/?&cursor=0:0:1>; rel="previous"; results="false"; cursor="0:0:1", <https://s.example/x/?&cursor=0:20:0>; rel="next"; results="true"; cursor="0:20:0""#;
        assert_eq!(
            next_page(header),
            Some("https://s.example/x/?&cursor=0:20:0")
        );
        let last = r#"<https://s.example/x/?&cursor=0:0:1>; rel="previous"; results="true", <https://s.example/x/?&cursor=0:40:0>; rel="next"; results="false""#;
        assert_eq!(next_page(last), None);
        assert_eq!(next_page(""), None);
        assert_eq!(next_page("garbage; rel=next; results=true"), None);
    }

    #[test]
    fn same_origin_only() {
        let s = source();
        assert!(s.same_origin(&"https://sentry.example/other?cursor=1".parse().unwrap()));
        assert!(!s.same_origin(&"https://evil.example/x".parse().unwrap()));
        assert!(!s.same_origin(&"http://sentry.example/x".parse().unwrap()));
    }

    #[test]
    fn search_answers() {
        let answer = r#"[{"id": "42", "uuid": "u", "debugId": "d", "codeId": null, "symbolType": "elf",
            "headers": {"Content-Type": "x"}, "size": 10, "sha1": "s", "dateCreated": "t", "data": {}},
            {"id": 7}]"#;
        let files = parse_search_answer(answer.as_bytes()).unwrap();
        assert_eq!(
            files,
            vec![
                SentryFileInfo { id: "42".into() },
                SentryFileInfo { id: "7".into() }
            ]
        );
    }
}
