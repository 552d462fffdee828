//! A tmpfs of a given size, mounted on a temp dir of its own, for tests of a full disk.
//! Mounting needs root (or CAP_SYS_ADMIN), as CI has; without, the tests that use it
//! fail unless `OMNISYM_ROOT_TESTS=skip` is set.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// A tmpfs of its own, mounted on a temp dir and detached on drop.
pub struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// `Err` says why it could not be mounted (not root, no CAP_SYS_ADMIN, ...).
    pub fn mount(bytes: u64) -> Result<Tmpfs, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let target = CString::new(dir.path().as_os_str().as_bytes()).unwrap();
        let options = CString::new(format!("size={bytes},mode=0755")).unwrap();
        // SAFETY: every pointer is a NUL-terminated string that outlives the call.
        let rc = unsafe {
            libc::mount(
                c"tmpfs".as_ptr(),
                target.as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                options.as_ptr().cast(),
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error().to_string());
        }
        Ok(Tmpfs { dir })
    }

    /// [`Tmpfs::mount`], or `None` once [`super::skip_or_fail`] allowed `test` to skip.
    pub fn mount_or_skip(bytes: u64, test: &str) -> Option<Tmpfs> {
        match Tmpfs::mount(bytes) {
            Ok(tmpfs) => Some(tmpfs),
            Err(err) => {
                super::skip_or_fail(
                    super::ROOT_TESTS,
                    test,
                    &format!("cannot mount a tmpfs ({err}); run as root or with CAP_SYS_ADMIN"),
                );
                None
            }
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    fn available(&self) -> u64 {
        let path = CString::new(self.path().as_os_str().as_bytes()).unwrap();
        // SAFETY: statvfs fills the struct it is given; the path is NUL-terminated.
        let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::statvfs(path.as_ptr(), &mut stat) }, 0);
        stat.f_bavail as u64 * stat.f_frsize as u64
    }

    /// Fills the file system until `leave` bytes are free; the filler goes on drop.
    pub fn fill(&self, leave: u64) -> Filler {
        let path = self.path().join("filler");
        let take = self.available().saturating_sub(leave);
        // tmpfs allocates what is written, not what a length claims: write zeros.
        let zeros = vec![0u8; 64 * 1024];
        let mut file = std::fs::File::create(&path).unwrap();
        let mut left = take;
        while left > 0 {
            let n = left.min(zeros.len() as u64) as usize;
            std::io::Write::write_all(&mut file, &zeros[..n]).unwrap();
            left -= n as u64;
        }
        Filler(path)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let target = CString::new(self.path().as_os_str().as_bytes()).unwrap();
        // SAFETY: the path is NUL-terminated. Detached: a server that has not exited yet
        // may still hold files open.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    }
}

/// The file that fills a [`Tmpfs`]; removed on drop, which frees the space again.
pub struct Filler(PathBuf);

impl Drop for Filler {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
