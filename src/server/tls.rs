//! TLS for the webhook listener: the rustls server configuration, the server
//! certificate that follows its files on disk, and optional client
//! certificate verification (see [`super::client_ca`] for how the client CA
//! file is followed).
//!
//! # Certificate rotation
//!
//! Secret volumes are updated like ConfigMaps: the kubelet writes a new
//! timestamped directory and renames a `..data` symlink over the old one, so
//! `tls.crt` and `tls.key` change together and atomically. cert-manager
//! renews certificates that way, long before they expire.
//!
//! [`FileCert`] is a [`ResolvesServerCert`] that, at each handshake, compares
//! the files' metadata (through the symlinks) with what it loaded last, and
//! reloads when they differ. A new handshake therefore always gets the current
//! certificate, without a watcher thread or a restart; open connections keep
//! the certificate they were established with and are not interrupted. The
//! check is two `stat` calls per handshake, and handshakes are rare: the API
//! server keeps its connections open. A pair that fails to load (a key that
//! does not match, a half-written file) is reported once and the previous
//! certificate stays in use until the files change again.
//!
//! ALPN: the listener (`server::accept`) sets `h2` and `http/1.1` itself, so
//! [`server_config`] leaves the protocol list empty.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use arc_swap::ArcSwap;
use rustls::crypto::CryptoProvider;
use rustls::server::danger::ClientCertVerifier;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// Why a TLS configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read or holds no usable item.
    #[error("cannot read {what} from {path}")]
    Pem {
        /// `certificate`, `private key` or `client CA`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: rustls_pki_types::pem::Error,
    },
    /// A certificate file holds no certificate.
    #[error("{path} holds no PEM certificate")]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// The key does not fit the certificate, or is of an unsupported type.
    #[error("cannot use the key {key} with the certificate {cert}")]
    Key {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// The cause.
        #[source]
        source: rustls::Error,
    },
    /// A client CA certificate was rejected as a trust anchor.
    #[error("cannot use {path} as a client CA")]
    ClientCa {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: rustls::Error,
    },
    /// The client verifier could not be built.
    #[error("cannot build the client certificate verifier")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
    /// rustls refused the configuration.
    #[error("cannot build the TLS configuration")]
    Config(#[from] rustls::Error),
}

/// The crypto provider kadmit uses everywhere: ring, chosen explicitly. With
/// two providers compiled in (a dependency's default features can turn on
/// rustls' aws-lc-rs next to ring), rustls cannot pick one by itself and
/// `ServerConfig::builder()` panics at runtime; naming ring here, and
/// installing it first thing in `main`, keeps any transitive feature from
/// making the choice ambiguous. ring is also what rcgen uses, and it avoids
/// building aws-lc-sys.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The rustls configuration of a listener serving `certs` (one resolver for
/// both listeners, so a rotation reaches both), verifying client
/// certificates with `clients` when given (see [`super::client_ca`]) and
/// requesting none otherwise.
pub fn server_config(
    certs: Arc<dyn ResolvesServerCert>,
    clients: Option<Arc<dyn ClientCertVerifier>>,
) -> Result<ServerConfig, TlsError> {
    let builder =
        ServerConfig::builder_with_provider(provider()).with_safe_default_protocol_versions()?;
    let builder = match clients {
        Some(verifier) => builder.with_client_cert_verifier(verifier),
        None => builder.with_no_client_auth(),
    };
    Ok(builder.with_cert_resolver(certs))
}

pub(super) fn client_roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let certs = read_certs(path, "client CA")?;
    let mut roots = RootCertStore::empty();
    for cert in certs {
        roots.add(cert).map_err(|source| TlsError::ClientCa {
            path: path.to_owned(),
            source,
        })?;
    }
    Ok(roots)
}

fn read_certs(path: &Path, what: &'static str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem_error = |source| TlsError::Pem {
        what,
        path: path.to_owned(),
        source,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(pem_error)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(pem_error)?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_owned(),
        });
    }
    Ok(certs)
}

/// Reads a PEM certificate chain and private key into a [`CertifiedKey`],
/// checking that the key belongs to the certificate.
pub fn load_pair(cert: &Path, key: &Path) -> Result<CertifiedKey, TlsError> {
    let chain = read_certs(cert, "certificate")?;
    let private_key = PrivateKeyDer::from_pem_file(key).map_err(|source| TlsError::Pem {
        what: "private key",
        path: key.to_owned(),
        source,
    })?;
    CertifiedKey::from_der(chain, private_key, &provider()).map_err(|source| TlsError::Key {
        cert: cert.to_owned(),
        key: key.to_owned(),
        source,
    })
}

/// Warns about and records the validity of the leaf certificate of `key`.
fn observe_leaf(key: &CertifiedKey, source: &str) {
    if let Some(leaf) = key.cert.first() {
        super::validity::observe(leaf, source);
    }
}

/// Always the same certificate (the generated self-signed one).
#[derive(Debug)]
pub struct FixedCert(Arc<CertifiedKey>);

impl FixedCert {
    /// Serves `key` for every handshake.
    pub fn new(key: CertifiedKey) -> Self {
        observe_leaf(&key, "self-signed");
        FixedCert(Arc::new(key))
    }
}

impl ResolvesServerCert for FixedCert {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

/// The certificate in a pair of PEM files, reloaded when the files change.
///
/// See the [module documentation](self) for how changes are detected.
pub struct FileCert {
    cert: PathBuf,
    key: PathBuf,
    current: ArcSwap<CertifiedKey>,
    /// Metadata of the pair last loaded (or last found unloadable).
    seen: Mutex<PairStamp>,
}

impl fmt::Debug for FileCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileCert")
            .field("cert", &self.cert)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl FileCert {
    /// Loads the pair now; fails when it cannot be used, so a bad path is
    /// reported at startup rather than at the first handshake.
    pub fn load(cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Result<Self, TlsError> {
        let cert = cert.into();
        let key = key.into();
        // Take the stamp before reading: if the files change in between, the
        // next handshake sees a newer stamp and loads again.
        let stamp = PairStamp::of(&cert, &key);
        let loaded = load_pair(&cert, &key)?;
        observe_leaf(&loaded, &cert.display().to_string());
        Ok(FileCert {
            cert,
            key,
            current: ArcSwap::from_pointee(loaded),
            seen: Mutex::new(stamp),
        })
    }

    /// The certificate new handshakes get, after reloading it if its files
    /// changed.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.refresh();
        self.current.load_full()
    }

    fn refresh(&self) {
        let stamp = PairStamp::of(&self.cert, &self.key);
        // A poisoned lock only means another handshake panicked mid-reload;
        // the stamp it guards is still a valid value.
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if *seen == stamp {
            return;
        }
        *seen = stamp;
        match load_pair(&self.cert, &self.key) {
            Ok(loaded) => {
                observe_leaf(&loaded, &self.cert.display().to_string());
                self.current.store(Arc::new(loaded));
                tracing::info!(
                    cert = %self.cert.display(),
                    "Loaded the changed TLS certificate for new connections"
                );
            }
            Err(error) => {
                tracing::warn!(
                    error = %DisplayChain(&error),
                    cert = %self.cert.display(),
                    "Kept the previous TLS certificate: the changed files cannot be used"
                );
            }
        }
    }
}

impl ResolvesServerCert for FileCert {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// What identifies a version of a file: its metadata through symlinks.
/// `None` when the file cannot be examined (e.g. mid-swap).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct FileStamp {
    len: u64,
    modified: Option<SystemTime>,
    #[cfg(unix)]
    device: u64,
    #[cfg(unix)]
    inode: u64,
}

impl FileStamp {
    pub(super) fn of(path: &Path) -> Option<Self> {
        let metadata = std::fs::metadata(path).ok()?;
        #[cfg(unix)]
        use std::os::unix::fs::MetadataExt as _;
        Some(FileStamp {
            len: metadata.len(),
            modified: metadata.modified().ok(),
            #[cfg(unix)]
            device: metadata.dev(),
            #[cfg(unix)]
            inode: metadata.ino(),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct PairStamp(Option<FileStamp>, Option<FileStamp>);

impl PairStamp {
    fn of(cert: &Path, key: &Path) -> Self {
        PairStamp(FileStamp::of(cert), FileStamp::of(key))
    }
}

/// Displays an error with its sources, `a: b: c`, for one-line log fields.
pub struct DisplayChain<'a>(pub &'a (dyn std::error::Error + 'static));

impl fmt::Display for DisplayChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(cause) = source {
            write!(f, ": {cause}")?;
            source = cause.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_pair(dir: &Path, name: &str) -> (PathBuf, PathBuf, Vec<u8>) {
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .expect("params")
            .self_signed(&key)
            .expect("cert");
        let cert_path = dir.join(format!("{name}.crt"));
        let key_path = dir.join(format!("{name}.key"));
        std::fs::write(&cert_path, cert.pem()).expect("write cert");
        std::fs::write(&key_path, key.serialize_pem()).expect("write key");
        (cert_path, key_path, cert.der().to_vec())
    }

    fn served(resolver: &FileCert) -> Vec<u8> {
        resolver.current().cert[0].as_ref().to_vec()
    }

    #[test]
    fn reloads_when_the_files_are_replaced_and_keeps_the_old_pair_on_a_bad_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (a_cert, a_key, a_der) = write_pair(dir.path(), "a");
        let (b_cert, b_key, b_der) = write_pair(dir.path(), "b");
        let cert = dir.path().join("tls.crt");
        let key = dir.path().join("tls.key");
        std::fs::copy(&a_cert, &cert).expect("copy");
        std::fs::copy(&a_key, &key).expect("copy");

        let resolver = FileCert::load(&cert, &key).expect("load");
        assert_eq!(served(&resolver), a_der);

        // Replace by rename, as an atomic writer does: new inode.
        std::fs::copy(&b_cert, dir.path().join("new.crt")).expect("copy");
        std::fs::copy(&b_key, dir.path().join("new.key")).expect("copy");
        std::fs::rename(dir.path().join("new.crt"), &cert).expect("rename");
        std::fs::rename(dir.path().join("new.key"), &key).expect("rename");
        assert_eq!(served(&resolver), b_der);

        // A key that does not match the certificate: keep serving b.
        std::fs::copy(&a_key, dir.path().join("new.key")).expect("copy");
        std::fs::rename(dir.path().join("new.key"), &key).expect("rename");
        assert_eq!(served(&resolver), b_der);
    }

    #[test]
    fn a_missing_file_is_an_error_at_startup() {
        let dir = tempfile::tempdir().expect("tempdir");
        let error = FileCert::load(dir.path().join("none.crt"), dir.path().join("none.key"))
            .expect_err("missing files");
        assert!(error.to_string().contains("none.crt"), "{error}");
    }

    #[test]
    fn a_mismatched_key_is_an_error_at_startup() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (a_cert, _, _) = write_pair(dir.path(), "a");
        let (_, b_key, _) = write_pair(dir.path(), "b");
        let error = FileCert::load(&a_cert, &b_key).expect_err("mismatch");
        assert!(matches!(error, TlsError::Key { .. }), "{error}");
    }
}
