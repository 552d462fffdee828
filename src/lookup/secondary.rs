//! Secondary inputs of a derived cache: files that sit beside a module's object on the
//! same sources and change what the cache built from that object says (a SymCache's
//! il2cpp line mapping and BCSymbolMap). A format names what it looks for
//! ([`SecondaryInputs`]); finding one file is [`first_found`], over the same locator and
//! download cache as every other file. What they add to the cache's key is their
//! labelled download keys, so a module without any keeps the key it always had.

use futures::future::{self, BoxFuture};

use super::downloads::{Downloads, FileFormat, file_key};
use super::locate::Locator;
use super::objects::FoundObject;
use crate::cache::{CacheKey, Scope};
use crate::fetch::RemoteFile;
use crate::sources::{FileType, ObjectId, SourceConfig};

/// What a derived format finds beside the object it is built from. `()` for formats
/// built from the object alone.
pub trait SecondaryInputs: Sized + Send + Sync + 'static {
    /// What looks for them, shared by all requests (their download caches).
    type Finder: Send + Sync + 'static;

    /// Looks for them for the module `id`, whose object has been chosen already:
    /// `object`, whose location and what it records may say where they are.
    fn find<'a>(
        finder: &'a Self::Finder,
        sources: &'a [SourceConfig],
        id: &'a ObjectId,
        object: &'a FoundObject,
        scope: &'a Scope,
    ) -> BoxFuture<'a, Self>;

    /// One key for each file found, in a fixed order; they follow the object's key in the
    /// derived cache's key, so another file names another cache.
    fn keys(&self) -> Vec<CacheKey>;

    /// Bytes the conversion reads besides the object, for the conversion budget.
    fn size(&self) -> u64;
}

impl SecondaryInputs for () {
    type Finder = ();

    fn find<'a>(
        _: &'a (),
        _: &'a [SourceConfig],
        _: &'a ObjectId,
        _: &'a FoundObject,
        _: &'a Scope,
    ) -> BoxFuture<'a, Self> {
        Box::pin(future::ready(()))
    }

    fn keys(&self) -> Vec<CacheKey> {
        Vec::new()
    }

    fn size(&self) -> u64 {
        0
    }
}

/// A secondary file that was found and loaded.
#[derive(Clone)]
pub struct SecondaryFile<T> {
    pub file: RemoteFile,
    /// Its download key, labelled with what it is for: the part of a derived key it adds.
    pub key: CacheKey,
    pub item: T,
}

/// The first file of `filetype` for `id` on `sources`, in lookup order, that downloads
/// and loads as `F`. One that is missing, fails or is malformed is passed over (and
/// cached as such by its download cache like any file), as upstream does: a bad mapping
/// costs that mapping, never the module.
pub async fn first_found<F: FileFormat>(
    locator: &Locator,
    downloads: &Downloads<F>,
    (sources, id, scope): (&[SourceConfig], &ObjectId, &Scope),
    filetype: FileType,
    label: &str,
    hint: F::Hint,
) -> Option<SecondaryFile<F::Item>> {
    let files = locator.list_files(sources, &[filetype], id, scope).await;
    let fetches = files.into_iter().map(|file| {
        let hint = hint.clone();
        async move {
            let key = file_key(&file, scope);
            let item = downloads.get_keyed(key.clone(), &file, hint).await.ok()?;
            Some(SecondaryFile {
                file,
                key: key.derived(label),
                item,
            })
        }
    });
    future::join_all(fetches).await.into_iter().flatten().next()
}
