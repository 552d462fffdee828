//! `omnisym replay DIR --server URL`: every stored event in DIR (`*.json`, in name order)
//! becomes the requests Sentry would send for it, made to a running server (a `pending`
//! answer is polled until done); each answer is written back into the event, and a line
//! per request says how many of the pipeline's frames the event shows, and how many of
//! them are symbolicated, before and after. It measures a server against real traffic
//! without a Sentry in front.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde_json::Value;
use url::Url;

use super::ReplayArgs;
use super::event::{self, FrameCount, Plan};

pub fn run(args: ReplayArgs) -> anyhow::Result<()> {
    super::init_logging(None);
    if !args.timeout.is_finite() || args.timeout < 0.0 {
        bail!("--timeout: expected seconds >= 0");
    }
    let files = event_files(&args.dir)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let replay = Replay {
        client: reqwest::Client::builder()
            .user_agent(concat!("omnisym-replay/", env!("CARGO_PKG_VERSION")))
            .build()?,
        server: base_url(&args.server),
        timeout: args.timeout,
        args: &args,
    };
    let width = files
        .iter()
        .map(|f| display_name(f).chars().count())
        .max()
        .unwrap_or(0);
    let mut total = Totals::default();
    for file in &files {
        let name = display_name(file);
        let failed = total.failed;
        for line in runtime.block_on(replay.event(file, &mut total)) {
            println!("{name:<width$}  {line}");
        }
        total.failed_events += usize::from(total.failed > failed);
    }
    println!(
        "replayed {} events: {} requests, {} failed; symbolicated frames {} -> {}",
        files.len(),
        total.requests,
        total.failed,
        total.before,
        total.after
    );
    if total.failed_events > 0 {
        bail!("{} of {} events failed", total.failed_events, files.len());
    }
    Ok(())
}

/// `*.json` files directly in `dir`, sorted by name.
fn event_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .filter_map(|entry| Some(entry.ok()?.path()))
        .filter(|path| path.is_file() && path.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    if files.is_empty() {
        bail!("{} holds no stored events (*.json)", dir.display());
    }
    Ok(files)
}

fn display_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// The server's URL as a base that endpoint paths are joined below, keeping any prefix.
fn base_url(server: &Url) -> Url {
    let mut base = server.clone();
    if !base.path().ends_with('/') {
        base.set_path(&format!("{}/", base.path()));
    }
    base
}

#[derive(Default)]
struct Totals {
    requests: usize,
    /// Failed requests, and events that could not be turned into any.
    failed: usize,
    failed_events: usize,
    before: usize,
    after: usize,
}

struct Replay<'a> {
    client: reqwest::Client,
    server: Url,
    timeout: f64,
    args: &'a ReplayArgs,
}

impl Replay<'_> {
    /// Replays one event; returns its report lines.
    async fn event(&self, file: &Path, total: &mut Totals) -> Vec<String> {
        let stored = match read_event(file) {
            Ok(event) => event,
            Err(err) => {
                total.failed += 1;
                return vec![format!("-  failed: {err:#}")];
            }
        };
        let plans = match event::plans(&stored) {
            Ok(plans) => plans,
            Err(err) => {
                total.failed += 1;
                return vec![format!("-  failed: {err:#}")];
            }
        };
        if plans.is_empty() {
            return vec!["-  nothing to symbolicate".to_owned()];
        }
        let mut event = stored.clone();
        let mut lines = Vec::new();
        for plan in &plans {
            total.requests += 1;
            let endpoint = plan.pipeline.endpoint();
            let before = event::count(&stored, plan.pipeline);
            let outcome = match self.request(plan).await {
                Ok(answer) => event::apply(&mut event, plan, &answer),
                Err(err) => Err(err),
            };
            match outcome {
                Ok(()) => {
                    let after = event::count(&event, plan.pipeline);
                    total.before += before.symbolicated;
                    total.after += after.symbolicated;
                    lines.push(format!("{endpoint:<16}  {}", report(before, after)));
                }
                Err(err) => {
                    total.failed += 1;
                    lines.push(format!("{endpoint:<16}  failed: {err:#}"));
                }
            }
        }
        lines
    }

    /// Sends `plan`'s request and waits for its answer, polling while it is pending.
    async fn request(&self, plan: &Plan) -> anyhow::Result<Value> {
        let mut body = plan.body.clone();
        if !self.args.sources.is_empty() {
            body["sources"] = serde_json::to_value(self.args.sources.sources(plan.pipeline)?)?;
        }
        let url = self.url(plan.pipeline.endpoint(), self.timeout)?;
        let request = self
            .client
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(serde_json::to_vec(&body)?);
        let mut answer = self.answer(request).await?;
        while answer["status"] == "pending" {
            let id = answer["request_id"]
                .as_str()
                .context("a pending answer without a request_id")?;
            tracing::debug!(request_id = id, "pending; polling");
            // Waiting on the server beats polling it in a tight loop.
            let url = self.url(&format!("/requests/{id}"), self.timeout.max(1.0))?;
            answer = self.answer(self.client.get(url)).await?;
        }
        Ok(answer)
    }

    fn url(&self, path: &str, timeout: f64) -> anyhow::Result<Url> {
        let mut url = self.server.join(path.trim_start_matches('/'))?;
        url.query_pairs_mut()
            .append_pair("timeout", &timeout.to_string());
        Ok(url)
    }

    async fn answer(&self, request: reqwest::RequestBuilder) -> anyhow::Result<Value> {
        let response = request.send().await.context("cannot reach the server")?;
        let status = response.status();
        let text = response.text().await.context("cannot read the answer")?;
        if !status.is_success() {
            bail!("{status}: {}", text.trim());
        }
        serde_json::from_str(&text).with_context(|| format!("the answer is not JSON: {text}"))
    }
}

fn read_event(file: &Path) -> anyhow::Result<Value> {
    let text = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    serde_json::from_slice(&text).context("not a JSON event")
}

fn report(before: FrameCount, after: FrameCount) -> String {
    format!(
        "frames {} -> {}  symbolicated {} -> {}",
        before.frames, after.frames, before.symbolicated, after.symbolicated
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::event::Pipeline;

    #[test]
    fn endpoints_join_below_the_server_url() {
        for (server, want) in [
            (
                "http://127.0.0.1:3021",
                "http://127.0.0.1:3021/symbolicate?timeout=5",
            ),
            ("http://h/prefix", "http://h/prefix/symbolicate?timeout=5"),
            ("http://h/prefix/", "http://h/prefix/symbolicate?timeout=5"),
        ] {
            let replay = Replay {
                client: reqwest::Client::new(),
                server: base_url(&server.parse().unwrap()),
                timeout: 5.0,
                args: &ReplayArgs {
                    dir: PathBuf::new(),
                    server: server.parse().unwrap(),
                    sources: Default::default(),
                    timeout: 5.0,
                },
            };
            let url = replay.url(Pipeline::Native.endpoint(), 5.0).unwrap();
            assert_eq!(url.as_str(), want);
        }
    }
}
