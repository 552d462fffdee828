//! A fleet: replicas behind one load balancer that answer as one service. This module
//! owns who this replica's peers are (a fixed list, and a name resolved in DNS, as a
//! Kubernetes headless Service gives one), which of them minted a request id, and
//! sending a poll on to that replica, so that a poll is answered wherever it lands.
//!
//! Nothing here is a cluster protocol of its own: a request id names its owner (see
//! [`OwnerTag`]), and a poll for another replica's id is an ordinary
//! `GET /requests/{id}` to it. Only ids whose owner is a known peer are sent on, so a
//! client cannot make the server call an address of its choosing.

mod peers;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use reqwest::StatusCode;
use serde::Deserialize;
use url::Url;

use crate::service::{OwnerTag, RequestId};
use crate::units::deserialize_duration;

use peers::Peers;
pub use peers::owner_tag;

/// The header a poll sent on by a peer carries: its answer is the owner's own, never
/// sent on again.
pub const FORWARDED_HEADER: &str = "omnisym-forwarded";

/// The `fleet` section of the config (omnisym only).
#[derive(Clone, Debug, Deserialize)]
#[serde(default)]
pub struct FleetConfig {
    /// This replica's address as its peers reach it (`http://10.0.0.5:3021`; in
    /// Kubernetes, `http://${POD_IP}:3021`). Unset: no fleet, ids name no replica.
    pub advertise_url: Option<Url>,
    /// Peers' addresses, this replica's own among them or not.
    pub peers: Vec<Url>,
    /// `host:port` whose addresses (every A and AAAA record) are peers, reached over
    /// plain HTTP: a headless Service's name, with `publishNotReadyAddresses` so that
    /// a draining replica still answers polls for its requests.
    pub peers_dns: Option<String>,
    /// How old the resolved `peers_dns` may be before a poll for an unknown owner
    /// resolves it again.
    #[serde(deserialize_with = "deserialize_duration")]
    pub peers_refresh: Duration,
    /// How long connecting to a peer may take before the poll is answered 404.
    #[serde(deserialize_with = "deserialize_duration")]
    pub connect_timeout: Duration,
}

impl Default for FleetConfig {
    fn default() -> Self {
        FleetConfig {
            advertise_url: None,
            peers: Vec::new(),
            peers_dns: None,
            peers_refresh: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(2),
        }
    }
}

impl FleetConfig {
    /// Why the section cannot work, if it cannot.
    pub fn check(&self) -> Result<(), String> {
        let advertised = self.advertise_url.is_some();
        if !advertised && (!self.peers.is_empty() || self.peers_dns.is_some()) {
            return Err(
                "fleet.advertise_url is needed with peers: the ids a replica \
                        hands out must name it"
                    .into(),
            );
        }
        for url in self.advertise_url.iter().chain(&self.peers) {
            if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
                return Err(format!("fleet: `{url}` is not an http(s) address"));
            }
        }
        if let Some(name) = &self.peers_dns {
            peers::split_host_port(name)
                .ok_or_else(|| format!("fleet.peers_dns: `{name}` is not host:port"))?;
        }
        Ok(())
    }
}

/// This replica's place in a fleet.
pub struct Fleet {
    own: OwnerTag,
    peers: Peers,
    client: reqwest::Client,
}

/// What the owner of a polled id answered.
pub struct ForwardedAnswer {
    pub status: StatusCode,
    pub body: Bytes,
}

/// Where a poll for an id goes.
pub enum PollRoute {
    /// This replica minted it, or no known replica did (the answer is then 404 here).
    Here,
    /// A peer minted it.
    Peer(Url),
}

impl Fleet {
    /// `None` without `fleet.advertise_url`.
    pub fn new(config: &FleetConfig) -> anyhow::Result<Option<Arc<Fleet>>> {
        let Some(advertised) = &config.advertise_url else {
            return Ok(None);
        };
        let client = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            // Peers are the operator's, on the cluster network: no proxy from the
            // environment, and reserved addresses allowed (pod IPs are private).
            .no_proxy()
            .build()?;
        Ok(Some(Arc::new(Fleet {
            own: owner_tag(advertised),
            peers: Peers::new(config),
            client,
        })))
    }

    /// What leads the ids this replica mints.
    pub fn own_tag(&self) -> OwnerTag {
        self.own
    }

    /// Where a poll for `id` goes.
    pub async fn route(&self, id: RequestId) -> PollRoute {
        match id.owner() {
            Some(owner) if owner != self.own => match self.peers.find(owner).await {
                Some(url) => PollRoute::Peer(url),
                None => PollRoute::Here,
            },
            _ => PollRoute::Here,
        }
    }

    /// Asks `peer` for `id`'s answer, waiting up to `timeout` as the poll itself does;
    /// `None` when the peer cannot be reached (gone, or restarted under another
    /// address): its requests went with it.
    pub async fn forward_poll(
        &self,
        peer: &Url,
        id: RequestId,
        timeout: Duration,
    ) -> Option<ForwardedAnswer> {
        let mut url = peer.clone();
        url.set_path(&format!("/requests/{id}"));
        url.set_query(Some(&format!("timeout={}", timeout.as_secs())));
        let response = self
            .client
            .get(url)
            .header(FORWARDED_HEADER, "1")
            // The owner waits up to `timeout`; the margin covers the answer's way back.
            .timeout(timeout + Duration::from_secs(10))
            .send()
            .await;
        let response = match response {
            Ok(response) => response,
            Err(err) => {
                tracing::info!(%peer, %id, error = %err, "the owner of a polled request cannot be reached");
                return None;
            }
        };
        let status = response.status();
        match response.bytes().await {
            Ok(body) => Some(ForwardedAnswer { status, body }),
            Err(err) => {
                tracing::info!(%peer, %id, error = %err, "the owner of a polled request broke off its answer");
                None
            }
        }
    }
}
