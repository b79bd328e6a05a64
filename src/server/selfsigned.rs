//! The development certificate: a throwaway CA and a server certificate for
//! `localhost`, `127.0.0.1` and `::1`, made when `serve` has no certificate
//! files, so that `cargo run -- serve` works on a fresh clone.
//!
//! The CA certificate and a sample review are written to a directory so that a
//! client can trust the server and try it at once ([`curl_line`]). Both are
//! regenerated at every start; nothing here is meant for a cluster.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::sign::CertifiedKey;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// The names the server certificate is valid for.
pub const SERVER_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// Why the development certificate could not be made or written.
#[derive(Debug, thiserror::Error)]
pub enum SelfSignedError {
    /// rcgen failed to generate a key or certificate.
    #[error("cannot generate the self-signed certificate")]
    Generate(#[from] rcgen::Error),
    /// rustls refused the generated key.
    #[error("cannot use the generated key")]
    Key(#[from] rustls::Error),
    /// The CA file or the sample review could not be written.
    #[error("cannot write {path}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

/// A generated CA and the server certificate it signed.
pub struct SelfSigned {
    /// The CA certificate, PEM: what clients must trust.
    pub ca_pem: String,
    /// The server certificate and key, ready for rustls.
    pub server: CertifiedKey,
}

impl std::fmt::Debug for SelfSigned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SelfSigned").finish_non_exhaustive()
    }
}

/// Generates a CA and a server certificate (ECDSA P-256) for
/// [`SERVER_NAMES`].
pub fn generate() -> Result<SelfSigned, SelfSignedError> {
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::default();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "kadmit development CA");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::from_params(&ca_params, &ca_key);

    let server_key = KeyPair::generate()?;
    let mut server_params = CertificateParams::new(SERVER_NAMES.map(str::to_owned).to_vec())?;
    server_params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    server_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    server_params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    server_params.use_authority_key_identifier_extension = true;
    let server_cert = server_params.signed_by(&server_key, &issuer)?;

    let chain: Vec<CertificateDer<'static>> = vec![server_cert.der().clone()];
    let key = PrivateKeyDer::Pkcs8(server_key.serialize_der().into());
    let server = CertifiedKey::from_der(chain, key, &super::tls::provider())?;
    Ok(SelfSigned {
        ca_pem: ca_cert.pem(),
        server,
    })
}

/// Where [`write()`] put its files.
#[derive(Debug, Clone)]
pub struct Written {
    /// The CA certificate (PEM).
    pub ca: PathBuf,
    /// A sample AdmissionReview (Pod CREATE) to send.
    pub review: PathBuf,
}

/// Writes the CA certificate as `ca.pem` and a sample review as
/// `review.json` into `dir`, creating it.
pub fn write(self_signed: &SelfSigned, dir: &Path) -> Result<Written, SelfSignedError> {
    let write = |path: PathBuf, contents: &str| {
        std::fs::write(&path, contents)
            .map(|()| path.clone())
            .map_err(|source| SelfSignedError::Write { path, source })
    };
    std::fs::create_dir_all(dir).map_err(|source| SelfSignedError::Write {
        path: dir.to_owned(),
        source,
    })?;
    Ok(Written {
        ca: write(dir.join("ca.pem"), &self_signed.ca_pem)?,
        review: write(dir.join("review.json"), SAMPLE_REVIEW)?,
    })
}

/// The default directory: per process, so concurrent servers do not
/// overwrite each other's CA.
pub fn default_dir() -> PathBuf {
    std::env::temp_dir().join(format!("kadmit-{}", std::process::id()))
}

/// A `curl` command that sends `review` to `/validate` on `addr`, trusting
/// `ca`. An unspecified listen address (`0.0.0.0`, `::`) becomes
/// `127.0.0.1`, which the certificate covers.
pub fn curl_line(ca: &Path, addr: SocketAddr, review: &Path) -> String {
    let host = if addr.ip().is_unspecified() || addr.ip() == IpAddr::V4(Ipv4Addr::LOCALHOST) {
        "127.0.0.1".to_owned()
    } else if addr.ip().is_loopback() {
        "[::1]".to_owned()
    } else {
        addr.ip().to_string()
    };
    format!(
        "curl --cacert {} https://{host}:{}/validate -H 'Content-Type: application/json' --data @{}",
        ca.display(),
        addr.port(),
        review.display()
    )
}

/// A minimal Pod CREATE review, in the shape kube-apiserver sends.
const SAMPLE_REVIEW: &str = r#"{
  "kind": "AdmissionReview",
  "apiVersion": "admission.k8s.io/v1",
  "request": {
    "uid": "0d4a5e6f-0000-4000-8000-000000000001",
    "kind": {"group": "", "version": "v1", "kind": "Pod"},
    "resource": {"group": "", "version": "v1", "resource": "pods"},
    "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
    "requestResource": {"group": "", "version": "v1", "resource": "pods"},
    "name": "demo",
    "namespace": "default",
    "operation": "CREATE",
    "userInfo": {"username": "admin", "groups": ["system:masters", "system:authenticated"]},
    "object": {
      "kind": "Pod",
      "apiVersion": "v1",
      "metadata": {"name": "demo", "namespace": "default", "labels": {"app": "demo"}},
      "spec": {"containers": [{"name": "app", "image": "nginx:latest"}]}
    },
    "oldObject": null,
    "dryRun": false,
    "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}
  }
}
"#;

#[cfg(test)]
mod tests {
    use super::*;
    use rustls_pki_types::pem::PemObject as _;

    #[test]
    fn the_sample_review_decodes() {
        let review = crate::review::decode(SAMPLE_REVIEW.as_bytes()).expect("sample decodes");
        assert_eq!(review.request.uid, "0d4a5e6f-0000-4000-8000-000000000001");
    }

    #[test]
    fn generates_a_server_certificate_that_chains_to_the_ca() {
        let generated = generate().expect("generate");
        let ca = CertificateDer::from_pem_slice(generated.ca_pem.as_bytes()).expect("ca pem");
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca).expect("ca is a trust anchor");
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            std::sync::Arc::new(roots),
            super::super::tls::provider(),
        )
        .build()
        .expect("verifier");
        for name in SERVER_NAMES {
            let server_name =
                rustls_pki_types::ServerName::try_from(name).expect("valid server name");
            rustls::client::danger::ServerCertVerifier::verify_server_cert(
                verifier.as_ref(),
                &generated.server.cert[0],
                &[],
                &server_name,
                &[],
                rustls_pki_types::UnixTime::now(),
            )
            .unwrap_or_else(|error| panic!("{name}: {error}"));
        }
    }

    #[test]
    fn curl_line_targets_loopback_for_an_unspecified_address() {
        let line = curl_line(
            Path::new("/tmp/x/ca.pem"),
            "0.0.0.0:8443".parse().expect("addr"),
            Path::new("/tmp/x/review.json"),
        );
        assert_eq!(
            line,
            "curl --cacert /tmp/x/ca.pem https://127.0.0.1:8443/validate -H 'Content-Type: application/json' --data @/tmp/x/review.json"
        );
    }
}
