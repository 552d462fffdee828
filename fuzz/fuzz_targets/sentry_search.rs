//! One page of a Sentry debug-file search answer as `fetch/sentry.rs` reads it: the
//! `Link` header (first line of the input) and the JSON body (the rest). The next page
//! is followed only on the source's own origin, and every file id it lists becomes a
//! download URL on the source's endpoint and a candidate location.
//!
//! Our own code: any panic is a crash.

#![no_main]

use std::sync::{Arc, LazyLock};

use libfuzzer_sys::fuzz_target;
use omnisym::fetch::RemoteFile;
use omnisym::sources::{
    Secret, SentrySourceConfig, SourceConfig, next_page, parse_search_answer, sentry_file_uri,
};
use omnisym_fuzz::split_once;

static SOURCE: LazyLock<Arc<SentrySourceConfig>> = LazyLock::new(|| {
    Arc::new(SentrySourceConfig {
        id: "sentry:project".into(),
        url: "https://sentry.example/api/0/projects/org/proj/files/dsyms/"
            .parse()
            .expect("a valid URL"),
        token: Secret::new("token"),
        digests: Default::default(),
    })
});

fuzz_target!(|data: &[u8]| {
    let (link, body) = split_once(data, b'\n');
    let source = &*SOURCE;
    let page = source.url.clone();
    if let Some(next) = std::str::from_utf8(link)
        .ok()
        .and_then(next_page)
        .and_then(|link| page.join(link).ok())
        .filter(|next| source.same_origin(next))
    {
        assert_eq!(next.origin(), source.url.origin());
    }
    let Ok(files) = parse_search_answer(body) else {
        return;
    };
    for file in files {
        // A hostile id only ever changes the query of the download URL.
        let url = source.download_url(&file.id);
        assert_eq!(url.origin(), source.url.origin());
        assert_eq!(url.path(), source.url.path());
        let _ = sentry_file_uri(&file.id);
        let _file = RemoteFile::new(SourceConfig::Sentry(source.clone()), file.id);
    }
});
