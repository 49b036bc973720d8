//! Files that must be the server's user's own: the bearer token, `file` secrets, the
//! audit log and the live view's address (with its sign-in code). Each is opened without following a symlink at its last component and without
//! blocking (a FIFO at the path cannot hang start-up), then checked on the opened
//! descriptor, so that what was checked is what is used: a regular file, owned by the user
//! the server runs as, with no permission for group or others (an audit log may also be a
//! character device such as `/dev/null`). A file read is measured before it is read and
//! never read past its cap.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::fd::AsFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use nix::fcntl::{FcntlArg, OFlag, fcntl};

/// Why a private file cannot be used.
#[derive(Debug)]
pub enum Refusal {
    Missing,
    Symlink,
    Unopenable(io::Error),
    NotRegular,
    /// Owned by another user (`owner`).
    Foreign {
        owner: u32,
    },
    /// Group or others have a permission bit.
    Shared {
        mode: u32,
    },
    /// Longer than the cap.
    TooLarge {
        max: usize,
    },
    Unreadable(io::Error),
}

impl Refusal {
    /// The refusal as a sentence about `path` (never about what the file holds).
    pub fn describe(&self, path: &Path) -> String {
        let shown = path.display();
        match self {
            Refusal::Missing => format!("`{shown}` does not exist"),
            Refusal::Symlink => {
                format!("`{shown}` is a symbolic link; name the file itself")
            }
            Refusal::Unopenable(e) => format!("`{shown}` cannot be opened ({e})"),
            Refusal::NotRegular => format!("`{shown}` is not a regular file"),
            Refusal::Foreign { owner } => format!(
                "`{shown}` belongs to user {owner}, not to the user the server runs as ({})",
                nix::unistd::geteuid()
            ),
            Refusal::Shared { mode } => format!(
                "`{shown}` has mode {mode:04o}: group or others can access it; make it private \
                 with `chmod 600 {shown}`"
            ),
            Refusal::TooLarge { max } => format!("`{shown}` is over {max} bytes"),
            Refusal::Unreadable(e) => format!("`{shown}` cannot be read ({e})"),
        }
    }
}

fn opened(path: &Path, options: &mut OpenOptions) -> Result<File, Refusal> {
    let flags = libc::O_NOFOLLOW | libc::O_NONBLOCK;
    match options.custom_flags(flags).open(path) {
        Ok(file) => {
            // Only the open was not to block; reads and writes of a regular file do not.
            let blocking = fcntl(file.as_fd(), FcntlArg::F_GETFL)
                .map(|f| OFlag::from_bits_truncate(f) - OFlag::O_NONBLOCK)
                .and_then(|f| fcntl(file.as_fd(), FcntlArg::F_SETFL(f)));
            blocking.map_err(|e| Refusal::Unopenable(e.into()))?;
            Ok(file)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(Refusal::Missing),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => Err(Refusal::Symlink),
        // Opened for writing without blocking, a FIFO no one reads (or a device missing).
        Err(e) if e.raw_os_error() == Some(libc::ENXIO) => Err(Refusal::NotRegular),
        Err(e) => Err(Refusal::Unopenable(e)),
    }
}

/// The opened file is a regular file of the server's user; its metadata.
fn owned(file: &File) -> Result<std::fs::Metadata, Refusal> {
    let meta = file.metadata().map_err(Refusal::Unreadable)?;
    if !meta.file_type().is_file() {
        return Err(Refusal::NotRegular);
    }
    if meta.uid() != nix::unistd::geteuid().as_raw() {
        return Err(Refusal::Foreign { owner: meta.uid() });
    }
    Ok(meta)
}

/// Read a private file of at most `max` bytes.
pub fn read(path: &Path, max: usize) -> Result<Vec<u8>, Refusal> {
    let file = opened(path, OpenOptions::new().read(true))?;
    let meta = owned(&file)?;
    let mode = meta.mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(Refusal::Shared { mode });
    }
    if meta.len() > max as u64 {
        return Err(Refusal::TooLarge { max });
    }
    let mut bytes = Vec::new();
    // One byte past the cap tells a file that grew since it was measured.
    file.take(max as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(Refusal::Unreadable)?;
    if bytes.len() > max {
        return Err(Refusal::TooLarge { max });
    }
    Ok(bytes)
}

/// Open a private file for appending, creating it with mode 0600 when absent; an existing
/// file of the server's user that group or others may access is made private (0600). A
/// character device (`/dev/null`, `/dev/full`) is taken as it is: only root makes one, and
/// it keeps nothing.
pub fn open_append(path: &Path) -> Result<File, Refusal> {
    let file = opened(
        path,
        OpenOptions::new().append(true).create(true).mode(0o600),
    )?;
    if let Some(meta) = appendable(&file)?
        && meta.mode() & 0o077 != 0
    {
        let private = std::fs::Permissions::from_mode(meta.mode() & 0o700);
        file.set_permissions(private).map_err(Refusal::Unopenable)?;
    }
    Ok(file)
}

/// An opened log taken as it is (a character device: `None`), or a regular file of the
/// server's user (its metadata).
fn appendable(file: &File) -> Result<Option<std::fs::Metadata>, Refusal> {
    use std::os::unix::fs::FileTypeExt;
    let kind = file.metadata().map_err(Refusal::Unreadable)?.file_type();
    if kind.is_char_device() {
        return Ok(None);
    }
    owned(file).map(Some)
}

/// Replace what a private file holds with `bytes`, creating it with mode 0600 when absent;
/// an existing one must be a regular file of the server's user (another user's file, or a
/// FIFO someone put there, is refused before anything is written), and is made private.
pub fn overwrite(path: &Path, bytes: &[u8]) -> Result<(), Refusal> {
    use std::io::Write;
    let mut file = opened(
        path,
        OpenOptions::new().write(true).create(true).mode(0o600),
    )?;
    owned(&file)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
        .and_then(|()| file.set_len(0))
        .and_then(|()| file.write_all(bytes))
        .map_err(Refusal::Unopenable)
}

/// Whether `open_append` would take `path`, changing nothing: an existing file is opened
/// (for appending, not created) and checked as it would be, and for an absent one the
/// directory it would be made in must let the server's user create it.
pub fn check_append(path: &Path) -> Result<(), Refusal> {
    use nix::unistd::{AccessFlags, eaccess};
    match opened(path, OpenOptions::new().append(true)) {
        Ok(file) => appendable(&file).map(drop),
        Err(Refusal::Missing) => {
            let dir = match path.parent() {
                Some(dir) if !dir.as_os_str().is_empty() => dir,
                _ => Path::new("."),
            };
            if !dir.is_dir() {
                return Err(Refusal::Unopenable(io::Error::from_raw_os_error(
                    libc::ENOTDIR,
                )));
            }
            // As the server would create it: with the effective user's rights.
            eaccess(dir, AccessFlags::W_OK | AccessFlags::X_OK)
                .map_err(|e| Refusal::Unopenable(e.into()))
        }
        Err(refusal) => Err(refusal),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str, mode: u32) {
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn only_a_private_regular_file_of_ours_within_its_cap_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        write(&file, "value", 0o600);
        assert_eq!(read(&file, 5).unwrap(), b"value");
        assert!(matches!(read(&file, 4), Err(Refusal::TooLarge { max: 4 })));
        write(&file, "value", 0o640);
        assert!(matches!(
            read(&file, 5),
            Err(Refusal::Shared { mode: 0o640 })
        ));
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert!(matches!(read(&link, 5), Err(Refusal::Symlink)));
        assert!(matches!(read(dir.path(), 5), Err(Refusal::NotRegular)));
        assert!(matches!(
            read(&dir.path().join("none"), 5),
            Err(Refusal::Missing)
        ));
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert!(matches!(read(&fifo, 5), Err(Refusal::NotRegular)));
    }

    #[test]
    fn an_appended_file_is_created_private_or_made_private() {
        let dir = tempfile::tempdir().unwrap();
        let created = dir.path().join("new");
        open_append(&created).unwrap();
        let mode = std::fs::metadata(&created).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let shared = dir.path().join("shared");
        write(&shared, "kept\n", 0o644);
        open_append(&shared).unwrap();
        let meta = std::fs::metadata(&shared).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o600);
        assert_eq!(std::fs::read_to_string(&shared).unwrap(), "kept\n");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&shared, &link).unwrap();
        assert!(matches!(open_append(&link), Err(Refusal::Symlink)));
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        // No reader: the open fails at once rather than wait for one.
        assert!(open_append(&fifo).is_err());
        let before = std::fs::metadata("/dev/null").unwrap().mode();
        open_append(Path::new("/dev/null")).unwrap();
        assert_eq!(std::fs::metadata("/dev/null").unwrap().mode(), before);
    }
}
