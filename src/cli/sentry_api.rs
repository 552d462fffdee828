//! `omnisym symbolicate --event-id`, as upstream's symbolicli works: the event (or the
//! minidump or Apple crash report attached to it) comes from a Sentry server's API, and
//! that project's debug files and artifacts are sources beside the command line's.
//!
//! The server, organisation, project and token come from the command line, then
//! `SENTRY_AUTH_TOKEN` for the token, then a settings file in symbolicli's TOML
//! (`org`, `project`, `url`, `auth = { token = "..." }`): `--settings FILE`, else
//! `.symboliclirc` in the working directory, then in the home directory.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde::Deserialize;
use url::Url;

use super::SymbolicateArgs;
use crate::sources::{Secret, SentrySourceConfig, SourceId};

/// sentry.io, as symbolicli defaults to.
const DEFAULT_URL: &str = "https://sentry.io/";
const SETTINGS_FILE: &str = ".symboliclirc";
/// An event's JSON, or a crash file attached to it: far more is not what was asked for.
const MAX_DOWNLOAD: u64 = 512 << 20;

#[derive(Debug, Default, Deserialize)]
struct Settings {
    org: Option<String>,
    project: Option<String>,
    url: Option<String>,
    auth: Option<Auth>,
}

#[derive(Debug, Default, Deserialize)]
struct Auth {
    token: Option<Secret>,
}

impl Settings {
    fn read(path: &Path) -> anyhow::Result<Option<Settings>> {
        match std::fs::read_to_string(path) {
            Ok(text) => toml::from_str(&text)
                .map(Some)
                .with_context(|| format!("cannot read settings {}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("cannot read settings {}", path.display())),
        }
    }

    /// `--settings`, or the project's file and then the user's, the first found winning
    /// key by key.
    fn find(explicit: Option<&Path>) -> anyhow::Result<Settings> {
        if let Some(path) = explicit {
            return Settings::read(path)?
                .with_context(|| format!("no settings file at {}", path.display()));
        }
        let mut merged = Settings::default();
        let candidates = [
            std::env::current_dir().ok().map(|d| d.join(SETTINGS_FILE)),
            dirs::home_dir().map(|d| d.join(SETTINGS_FILE)),
        ];
        for path in candidates.into_iter().flatten() {
            if let Some(found) = Settings::read(&path)? {
                merged.org = merged.org.or(found.org);
                merged.project = merged.project.or(found.project);
                merged.url = merged.url.or(found.url);
                let token = merged.auth.and_then(|a| a.token);
                merged.auth = Some(Auth {
                    token: token.or(found.auth.and_then(|a| a.token)),
                });
            }
        }
        Ok(merged)
    }
}

/// One project on a Sentry server, and the token to read it with.
pub struct SentryProject {
    /// `<url>/api/0/projects/<org>/<project>/`.
    project: Url,
    token: Secret,
    client: reqwest::Client,
}

impl SentryProject {
    pub fn from_args(args: &SymbolicateArgs) -> anyhow::Result<SentryProject> {
        let settings = Settings::find(args.settings.as_deref())?;
        let token = args
            .auth_token
            .clone()
            .map(Secret::new)
            .or_else(|| std::env::var("SENTRY_AUTH_TOKEN").ok().map(Secret::new))
            .or(settings.auth.and_then(|a| a.token))
            .filter(|t| !t.is_empty())
            .context("no auth token: pass --auth-token, set SENTRY_AUTH_TOKEN, or put `auth = { token = \"...\" }` in .symboliclirc")?;
        let org = args
            .org
            .clone()
            .or(settings.org)
            .context("no organization: pass --org or put `org = \"...\"` in .symboliclirc")?;
        let project =
            args.project.clone().or(settings.project).context(
                "no project: pass --project or put `project = \"...\"` in .symboliclirc",
            )?;
        let url = args
            .url
            .clone()
            .or(settings.url)
            .unwrap_or_else(|| DEFAULT_URL.to_owned());
        let mut base = Url::parse(&url).with_context(|| format!("--url {url}"))?;
        if !matches!(base.scheme(), "http" | "https") {
            bail!("--url {url}: not an http(s) URL");
        }
        // Segments, not text: an organisation or project slug cannot reach another path.
        base.path_segments_mut()
            .map_err(|()| anyhow::anyhow!("--url {url}: cannot be a base URL"))?
            .pop_if_empty()
            .extend(["api", "0", "projects", &org, &project, ""]);
        Ok(SentryProject {
            project: base,
            token,
            client: reqwest::Client::builder()
                .user_agent(concat!("omnisym/", env!("CARGO_PKG_VERSION")))
                .build()?,
        })
    }

    fn endpoint(&self, segments: &[&str]) -> Url {
        let mut url = self.project.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments).push("");
        }
        url
    }

    /// The project's debug files (native and ProGuard), as a Sentry source.
    pub fn debug_files(&self) -> SentrySourceConfig {
        self.source(self.endpoint(&["files", "dsyms"]))
    }

    /// The project's artifact lookup (JavaScript), as a Sentry source.
    pub fn artifacts(&self) -> SentrySourceConfig {
        self.source(self.endpoint(&["artifact-lookup"]))
    }

    fn source(&self, url: Url) -> SentrySourceConfig {
        SentrySourceConfig {
            id: SourceId::new("sentry:project"),
            url,
            token: self.token.clone(),
            digests: Default::default(),
        }
    }

    /// Downloads what symbolicating `event_id` starts from into `dir`: the minidump or
    /// Apple crash report attached to the event if there is one (as Sentry processes
    /// such events from the file), else the event's JSON.
    pub async fn download(&self, event_id: &str, dir: &Path) -> anyhow::Result<PathBuf> {
        let id = uuid::Uuid::parse_str(event_id)
            .with_context(|| format!("--event-id {event_id}: not an event id"))?
            .simple()
            .to_string();
        std::fs::create_dir_all(dir)?;
        let attachments = self.endpoint(&["events", &id, "attachments"]);
        let listed: Vec<Attachment> = match self.get(attachments.clone()).await {
            Ok(body) => serde_json::from_slice(&body).context("the event's attachments")?,
            // Older servers, or a token without access to attachments: the event alone.
            Err(err) => {
                tracing::warn!(error = %err, "cannot list the event's attachments");
                Vec::new()
            }
        };
        let crash = listed
            .iter()
            .find(|a| matches!(a.ty.as_str(), "event.minidump" | "event.applecrashreport"));
        let (url, name) = match crash {
            Some(crash) => {
                let mut url = attachments.clone();
                if let Ok(mut path) = url.path_segments_mut() {
                    path.pop_if_empty().push(&crash.id).push("");
                }
                url.query_pairs_mut().append_pair("download", "1");
                (url, format!("{id}.crash"))
            }
            None => (
                self.endpoint(&["events", &id, "json"]),
                format!("{id}.json"),
            ),
        };
        let body = self.get(url).await?;
        let path = dir.join(name);
        std::fs::write(&path, body).with_context(|| format!("cannot write {}", path.display()))?;
        Ok(path)
    }

    async fn get(&self, url: Url) -> anyhow::Result<Vec<u8>> {
        let mut response = self
            .client
            .get(url.clone())
            .bearer_auth(self.token.expose())
            .send()
            .await
            .with_context(|| format!("cannot reach {url}"))?;
        let status = response.status();
        if status == reqwest::StatusCode::NOT_FOUND {
            bail!("{url}: not found (is the event id right, and in this project?)");
        }
        if !status.is_success() {
            bail!("{url}: the server answered {status}");
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await? {
            body.extend_from_slice(&chunk);
            if body.len() as u64 > MAX_DOWNLOAD {
                bail!("{url}: larger than {MAX_DOWNLOAD} bytes");
            }
        }
        Ok(body)
    }
}

#[derive(Debug, Deserialize)]
struct Attachment {
    id: String,
    #[serde(rename = "type")]
    ty: String,
}
