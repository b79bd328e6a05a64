//! Client certificate verification against a `--client-ca` file that follows
//! the file on disk, like the serving certificate ([`super::tls::FileCert`]).
//!
//! rustls builds its [`WebPkiClientVerifier`] from a fixed set of trust
//! anchors. [`FileClientCa`] holds one such verifier and, when a client
//! presents a certificate, compares the file's metadata with what it loaded
//! last; when they differ it builds a new verifier from the file and uses it
//! from that handshake on. A file that cannot be used (half written, no
//! certificate) is reported once and the previous CAs stay in force until the
//! file changes again.
//!
//! One difference from a fixed verifier: the `CertificateRequest` carries no
//! CA names. rustls takes the names as a borrow of the verifier for the whole
//! handshake, which a verifier that can be replaced mid-way cannot lend.
//! An empty list is allowed by TLS and means "any certificate you have":
//! clients with one certificate (kube-apiserver's webhook client, curl) send
//! it either way, and the verification is unchanged.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::ArcSwap;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use rustls_pki_types::{CertificateDer, UnixTime};

use super::tls::{DisplayChain, FileStamp, TlsError, client_roots};

/// A client verifier built from the CAs in a PEM file, rebuilt when the file
/// changes.
pub struct FileClientCa {
    path: PathBuf,
    provider: Arc<CryptoProvider>,
    current: ArcSwap<Loaded>,
    /// Metadata of the file last loaded (or last found unusable).
    seen: Mutex<Option<FileStamp>>,
    /// Whether a client without a certificate is refused in the handshake.
    mandatory: bool,
}

/// The verifier of one version of the file.
struct Loaded(Arc<dyn ClientCertVerifier>);

impl fmt::Debug for FileClientCa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileClientCa")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// The verifier of client certificates for the CAs in `path`, read again
/// when the file changes: every client must present a certificate when
/// `required` (the webhook listener's `--client-ca`); otherwise one presented
/// must verify (the operations listener's `--ops-client-ca`).
pub fn verifier(path: &Path, required: bool) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    let provider = super::tls::provider();
    Ok(Arc::new(if required {
        FileClientCa::load(path, provider)?
    } else {
        FileClientCa::load_optional(path, provider)?
    }))
}

impl FileClientCa {
    /// Loads the CAs now; fails when the file cannot be used, so a bad path
    /// is reported at startup rather than at the first handshake.
    pub fn load(path: impl Into<PathBuf>, provider: Arc<CryptoProvider>) -> Result<Self, TlsError> {
        Self::load_with(path.into(), provider, true)
    }

    /// Like [`FileClientCa::load`], but a client may also connect without a
    /// certificate; one it presents must still verify. The operations
    /// listener uses this: kubelet probes carry no certificate, and
    /// [`super::access`] decides per path who needs one.
    pub fn load_optional(
        path: impl Into<PathBuf>,
        provider: Arc<CryptoProvider>,
    ) -> Result<Self, TlsError> {
        Self::load_with(path.into(), provider, false)
    }

    fn load_with(
        path: PathBuf,
        provider: Arc<CryptoProvider>,
        mandatory: bool,
    ) -> Result<Self, TlsError> {
        let stamp = FileStamp::of(&path);
        let verifier = build(&path, &provider)?;
        Ok(FileClientCa {
            path,
            provider,
            current: ArcSwap::from_pointee(Loaded(verifier)),
            seen: Mutex::new(stamp),
            mandatory,
        })
    }

    /// The verifier for this handshake, after reloading the file if it
    /// changed.
    fn current(&self) -> Arc<dyn ClientCertVerifier> {
        self.refresh();
        self.current.load().0.clone()
    }

    fn refresh(&self) {
        let stamp = FileStamp::of(&self.path);
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if *seen == stamp {
            return;
        }
        *seen = stamp;
        match build(&self.path, &self.provider) {
            Ok(verifier) => {
                self.current.store(Arc::new(Loaded(verifier)));
                tracing::info!(
                    client_ca = %self.path.display(),
                    "Loaded the changed client CA for new connections"
                );
            }
            Err(error) => {
                tracing::warn!(
                    error = %DisplayChain(&error),
                    client_ca = %self.path.display(),
                    "Kept the previous client CA: the changed file cannot be used"
                );
            }
        }
    }
}

fn build(
    path: &Path,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    let roots = client_roots(path)?;
    Ok(WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone()).build()?)
}

impl ClientCertVerifier for FileClientCa {
    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }

    /// None: see the [module documentation](self).
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.current()
            .verify_client_cert(end_entity, intermediates, now)
    }

    // The signature checks depend on the provider's algorithms only, not on
    // the CAs, so any version of the verifier answers them the same.
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.current
            .load()
            .0
            .verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.current
            .load()
            .0
            .verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.current.load().0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };

    use super::*;

    struct Ca {
        params: CertificateParams,
        key: KeyPair,
        pem: String,
    }

    fn ca(name: &str) -> Ca {
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::default();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        let pem = params.self_signed(&key).expect("CA").pem();
        Ca { params, key, pem }
    }

    fn client_cert(ca: &Ca) -> CertificateDer<'static> {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(vec!["client".to_owned()]).expect("params");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let issuer = Issuer::from_params(&ca.params, &ca.key);
        params.signed_by(&key, &issuer).expect("sign").der().clone()
    }

    fn accepts(verifier: &FileClientCa, cert: &CertificateDer<'_>) -> bool {
        verifier
            .verify_client_cert(cert, &[], UnixTime::now())
            .is_ok()
    }

    /// Issue 11: the `--client-ca` file was read once at startup.
    #[test]
    fn follows_the_file_and_keeps_the_old_cas_on_a_bad_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("client-ca.pem");
        let (first, second) = (ca("first"), ca("second"));
        std::fs::write(&path, &first.pem).expect("write");
        let verifier = FileClientCa::load(&path, super::super::tls::provider()).expect("load");
        assert!(verifier.root_hint_subjects().is_empty());
        assert!(accepts(&verifier, &client_cert(&first)));
        assert!(!accepts(&verifier, &client_cert(&second)));

        // Replaced by rename, as the kubelet and atomic writers do.
        std::fs::write(dir.path().join("new.pem"), &second.pem).expect("write");
        std::fs::rename(dir.path().join("new.pem"), &path).expect("rename");
        assert!(accepts(&verifier, &client_cert(&second)));
        assert!(!accepts(&verifier, &client_cert(&first)));

        // A file without a certificate: the second CA stays in force.
        std::fs::write(dir.path().join("new.pem"), "not a certificate").expect("write");
        std::fs::rename(dir.path().join("new.pem"), &path).expect("rename");
        assert!(accepts(&verifier, &client_cert(&second)));
    }

    #[test]
    fn an_unusable_file_is_an_error_at_startup() {
        let dir = tempfile::tempdir().expect("tempdir");
        let error = FileClientCa::load(dir.path().join("none.pem"), super::super::tls::provider())
            .expect_err("missing file");
        assert!(error.to_string().contains("none.pem"), "{error}");
    }
}
