//! Who the peers are, by the tag their ids carry.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use url::Url;

use crate::config::{FleetConfig, host_and_port};
use crate::service::OwnerTag;

/// The tag of the replica at `url`: a hash of its origin, so that a replica and its
/// peers derive the same tag from the same address however it was written
/// (`HTTP://Host:80/` and `http://host`).
pub fn owner_tag(url: &Url) -> OwnerTag {
    let digest = Sha256::digest(url.origin().ascii_serialization().as_bytes());
    let mut tag = [0; 6];
    tag.copy_from_slice(&digest[..6]);
    OwnerTag(tag)
}

pub(super) struct Peers {
    fixed: HashMap<OwnerTag, Url>,
    dns: Option<String>,
    refresh: Duration,
    /// The peers `dns` named when it was last resolved; one resolution at a time.
    resolved: tokio::sync::Mutex<Option<(Instant, HashMap<OwnerTag, Url>)>>,
}

impl Peers {
    pub(super) fn new(config: &FleetConfig) -> Self {
        Peers {
            fixed: config
                .peers
                .iter()
                .map(|url| (owner_tag(url), url.clone()))
                .collect(),
            dns: config.peers_dns.clone(),
            refresh: config.peers_refresh,
            resolved: tokio::sync::Mutex::new(None),
        }
    }

    /// The peer whose ids carry `owner`. A tag that the last resolution did not know
    /// resolves the name again, at most once per `refresh`: a replica that started
    /// since is found, and unknown ids cost no lookup each.
    pub(super) async fn find(&self, owner: OwnerTag) -> Option<Url> {
        if let Some(url) = self.fixed.get(&owner) {
            return Some(url.clone());
        }
        let name = self.dns.as_deref()?;
        let mut resolved = self.resolved.lock().await;
        let fresh = resolved
            .as_ref()
            .is_some_and(|(at, _)| at.elapsed() < self.refresh);
        if !fresh {
            match resolve(name).await {
                Ok(peers) => *resolved = Some((Instant::now(), peers)),
                Err(err) => {
                    tracing::warn!(name, error = %err, "fleet.peers_dns does not resolve");
                    // Tried now: not again for every poll while DNS is down.
                    let kept = resolved.take().map(|(_, peers)| peers).unwrap_or_default();
                    *resolved = Some((Instant::now(), kept));
                }
            }
        }
        resolved.as_ref()?.1.get(&owner).cloned()
    }
}

async fn resolve(name: &str) -> std::io::Result<HashMap<OwnerTag, Url>> {
    let (host, port) = host_and_port(name)
        .ok_or_else(|| std::io::Error::other("fleet.peers_dns is not host:port"))?;
    let peers = tokio::net::lookup_host((host, port))
        .await?
        .filter_map(|addr| Url::parse(&format!("http://{addr}")).ok())
        .map(|url| (owner_tag(&url), url))
        .collect();
    Ok(peers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_address_one_tag_however_written() {
        let tag = |s: &str| owner_tag(&Url::parse(s).unwrap());
        assert_eq!(tag("http://10.0.0.5:3021"), tag("HTTP://10.0.0.5:3021/x?y"));
        assert_eq!(tag("http://host.example:80"), tag("http://Host.Example/"));
        assert_ne!(tag("http://10.0.0.5:3021"), tag("http://10.0.0.6:3021"));
        assert_ne!(tag("http://10.0.0.5:3021"), tag("https://10.0.0.5:3021"));
    }

    #[tokio::test]
    async fn a_name_resolves_to_peers_by_tag() {
        let config = FleetConfig {
            advertise_url: Some(Url::parse("http://127.0.0.1:1").unwrap()),
            peers: vec![Url::parse("http://10.9.9.9:3021").unwrap()],
            peers_dns: Some("localhost:3021".into()),
            ..FleetConfig::default()
        };
        let peers = Peers::new(&config);
        let fixed = owner_tag(&Url::parse("http://10.9.9.9:3021").unwrap());
        assert_eq!(
            peers.find(fixed).await.unwrap().as_str(),
            "http://10.9.9.9:3021/"
        );
        let local = owner_tag(&Url::parse("http://127.0.0.1:3021").unwrap());
        assert_eq!(
            peers.find(local).await.unwrap().as_str(),
            "http://127.0.0.1:3021/"
        );
        assert_eq!(peers.find(OwnerTag([9; 6])).await, None);
    }
}
