//! Listing the state area, for the protocols that must find what they left behind
//! (sentry-cli's chunks of uploads cut off by a restart).

use anyhow::bail;

use super::backend::Backend;
use super::{STATE, Store};

impl Store {
    /// The files under `prefix` in the state area (paths relative to it, as
    /// `state_put` takes them) and their sizes, at most `max`. A directory store only:
    /// the object-store clients have no listing, so a bucket store is an error.
    pub async fn state_list(&self, prefix: &str, max: usize) -> anyhow::Result<Vec<(String, u64)>> {
        let Backend::Directory { root } = &self.0.backend else {
            bail!("a store on S3 or GCS cannot list its state area");
        };
        let key = Self::state_key(prefix.trim_end_matches('/'))?;
        let dir = key.split('/').fold(root.clone(), |p, s| p.join(s));
        let base = root.join(STATE);
        tokio::task::spawn_blocking(move || {
            let mut out = Vec::new();
            let mut stack = vec![dir];
            while let Some(dir) = stack.pop() {
                let Ok(entries) = std::fs::read_dir(&dir) else {
                    continue;
                };
                for entry in entries.flatten() {
                    let Ok(meta) = entry.metadata() else { continue };
                    let path = entry.path();
                    if meta.is_dir() {
                        stack.push(path);
                    } else if meta.is_file()
                        && let Ok(rel) = path.strip_prefix(&base)
                        && let Some(rel) = rel.to_str()
                    {
                        out.push((rel.replace('\\', "/"), meta.len()));
                        if out.len() >= max {
                            return Ok(out);
                        }
                    }
                }
            }
            Ok(out)
        })
        .await?
    }
}
