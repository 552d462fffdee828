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
use url::Url;

use crate::config::FleetConfig;
use crate::service::{OwnerTag, RequestId};

use peers::Peers;
pub use peers::owner_tag;

/// The header a poll sent on by a peer carries: its answer is the owner's own, never
/// sent on again.
pub const FORWARDED_HEADER: &str = "omnisym-forwarded";

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
