//! A file system that never answers, for scenarios on what a hung mount must not stop.
//!
//! A FUSE mount whose daemon never reads its requests: every access below it (a lookup,
//! `stat`, `execve` of a program there) blocks in the kernel, as on a network file system
//! whose server is gone, until the mount is released. Releasing closes the FUSE device,
//! which aborts the connection (every blocked access fails with ENOTCONN), then detaches
//! the mount. Needs /dev/fuse and the right to mount (root).

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::fcntl::{OFlag, open};
use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sys::stat::Mode;

pub struct HungMount {
    path: PathBuf,
    /// The daemon's end of the connection, never read.
    device: Option<OwnedFd>,
}

impl HungMount {
    /// Mount it at `path` (created if missing).
    pub fn mount(path: &Path) -> Result<HungMount, String> {
        std::fs::create_dir_all(path)
            .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        // Close-on-exec: the server under test and other children must not hold it, or
        // closing ours would not end the connection.
        let device = open("/dev/fuse", OFlag::O_RDWR | OFlag::O_CLOEXEC, Mode::empty())
            .map_err(|e| format!("cannot open /dev/fuse: {e}"))?;
        let options = format!(
            "fd={},rootmode=40000,user_id={},group_id={}",
            device.as_raw_fd(),
            nix::unistd::getuid(),
            nix::unistd::getgid()
        );
        mount(
            Some("mcp-terminal-hung"),
            path,
            Some("fuse.hung"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some(options.as_str()),
        )
        .map_err(|e| format!("cannot mount a FUSE file system at {}: {e}", path.display()))?;
        Ok(HungMount {
            path: path.to_owned(),
            device: Some(device),
        })
    }
}

impl Drop for HungMount {
    fn drop(&mut self) {
        drop(self.device.take());
        let _ = umount2(&self.path, MntFlags::MNT_DETACH);
    }
}
