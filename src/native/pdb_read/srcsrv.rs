//! Where a PDB's source files are on a source server (its SRCSRV stream), as symbolic
//! 13.9 reads it into the files of its debug session (`pdb/srcsrv.rs`, crate-private
//! there): only a Perforce stream says anything, its depot path (`var3`, without the
//! leading `//`) and changelist (`var4`, when not empty); a stream that does not parse,
//! or names no VCS, is ignored and the file converts without it.

use std::collections::HashMap;

use symbolic::common::{AsSelf, ByteView, SelfCell};

use super::Streams;

/// A file's place on the source server: its path and revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceServerInfo {
    pub path: String,
    pub revision: Option<String>,
}

/// The parsed stream, borrowing its bytes.
struct Parsed<'s>(srcsrv::SrcSrvStream<'s>);

impl<'slf> AsSelf<'slf> for Parsed<'_> {
    type Ref = Parsed<'slf>;

    fn as_self(&'slf self) -> &'slf Self::Ref {
        // SAFETY: `Parsed` only borrows its bytes, so shortening that borrow is sound
        // (what symbolic's own `AsSelf` impls do).
        unsafe { std::mem::transmute::<&'slf Self, &'slf Parsed<'slf>>(self) }
    }
}

/// The SRCSRV stream of a PDB whose VCS is Perforce, owned (its bytes copied, as
/// symbolic copies them), with the answers so far for each path.
pub struct SourceServer {
    stream: SelfCell<ByteView<'static>, Parsed<'static>>,
    cache: HashMap<String, Option<SourceServerInfo>>,
}

impl SourceServer {
    /// `None` where symbolic adds nothing to any file: no stream, one that does not
    /// parse or names no VCS, or a VCS other than Perforce.
    pub fn new(streams: &Streams) -> Option<Self> {
        let bytes = streams.srcsrv.as_deref()?.to_vec();
        let stream = SelfCell::try_new(ByteView::from_vec(bytes), |data| {
            // SAFETY: the bytes are owned by the cell and never move or change.
            srcsrv::SrcSrvStream::parse(unsafe { &*data }).map(Parsed)
        })
        .ok()?;
        let vcs = stream.get().0.version_control_description()?;
        if !vcs.eq_ignore_ascii_case("perforce") {
            return None;
        }
        Some(SourceServer {
            stream,
            cache: HashMap::new(),
        })
    }

    /// The file at `path` (a file's `path_str`) on the source server.
    pub fn info(&mut self, path: &str) -> Option<SourceServerInfo> {
        if let Some(found) = self.cache.get(path) {
            return found.clone();
        }
        let found = Self::compute(&self.stream.get().0, path);
        self.cache.insert(path.to_owned(), found.clone());
        found
    }

    fn compute(stream: &srcsrv::SrcSrvStream<'_>, path: &str) -> Option<SourceServerInfo> {
        let Ok(Some((_method, vars))) = stream.source_and_raw_var_values_for_path(path, "") else {
            return None;
        };
        let depot = vars.get("var3")?.trim_start_matches("//");
        let revision = vars.get("var4").filter(|changelist| !changelist.is_empty());
        Some(SourceServerInfo {
            path: depot.to_owned(),
            revision: revision.cloned(),
        })
    }
}
