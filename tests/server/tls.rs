//! TLS of the webhook listener: client certificates with --client-ca, and a
//! certificate rotated by the kubelet's `..data` symlink swap while the
//! server runs.

use std::os::unix::fs::symlink;
use std::path::Path;

use super::harness::{
    Alpn, Kadmit, TestCa, bundled_rules, client, der_of, fixture, peer_certificate, post_json,
    roots_from_pem,
};

#[test]
fn client_ca_accepts_a_signed_client_and_refuses_none_or_a_foreign_one() {
    let client_ca = TestCa::new("kadmit test client CA");
    let foreign_ca = TestCa::new("someone else's CA");
    let dir = tempfile::tempdir().expect("tempdir");
    let ca_path = dir.path().join("client-ca.pem");
    std::fs::write(&ca_path, &client_ca.pem).expect("write client CA");

    let kadmit = Kadmit::with_rules(&bundled_rules())
        .args(["--client-ca".as_ref(), ca_path.as_os_str()])
        .start();
    let roots = roots_from_pem(kadmit.ca_pem());
    let url = kadmit.url("/validate");
    let body = fixture("create-pod.json");

    for alpn in [Alpn::H2AndHttp1, Alpn::Http1] {
        let good = client(
            &roots,
            Some(client_ca.client_identity("kube-apiserver")),
            alpn,
        );
        let (status, _, response) = post_json(&good, &url, body.clone());
        assert_eq!(status, 200, "{alpn:?}: {response}");

        let anonymous = client(&roots, None, alpn);
        let refused = anonymous
            .post(&url)
            .header("Content-Type", "application/json")
            .body(body.clone())
            .send();
        assert!(
            refused.is_err(),
            "{alpn:?}: a client without a certificate was served"
        );

        let foreign = client(&roots, Some(foreign_ca.client_identity("intruder")), alpn);
        let refused = foreign
            .post(&url)
            .header("Content-Type", "application/json")
            .body(body.clone())
            .send();
        assert!(
            refused.is_err(),
            "{alpn:?}: a client certificate from another CA was accepted"
        );
    }
}

/// Writes a kubelet-style atomic volume update: `dir/..<version>/` with the
/// files, `..data` pointing at it (renamed over the old link), and the
/// visible `tls.crt`/`tls.key` linking through `..data`.
fn publish(dir: &Path, version: &str, cert: &str, key: &str) {
    let versioned = dir.join(format!("..{version}"));
    std::fs::create_dir(&versioned).expect("versioned dir");
    std::fs::write(versioned.join("tls.crt"), cert).expect("write cert");
    std::fs::write(versioned.join("tls.key"), key).expect("write key");
    let tmp = dir.join("..data_tmp");
    symlink(format!("..{version}"), &tmp).expect("..data_tmp");
    let previous = std::fs::read_link(dir.join("..data")).ok();
    std::fs::rename(&tmp, dir.join("..data")).expect("swap ..data");
    for name in ["tls.crt", "tls.key"] {
        let visible = dir.join(name);
        if std::fs::symlink_metadata(&visible).is_err() {
            symlink(format!("..data/{name}"), &visible).expect("visible link");
        }
    }
    if let Some(previous) = previous {
        std::fs::remove_dir_all(dir.join(previous)).expect("remove the old version");
    }
}

#[test]
fn a_rotated_certificate_is_used_for_new_connections_while_open_ones_keep_working() {
    let first_ca = TestCa::new("first CA");
    let second_ca = TestCa::new("second CA");
    let (first_cert, first_key) = first_ca.server_cert();
    let (second_cert, second_key) = second_ca.server_cert();
    let volume = tempfile::tempdir().expect("tempdir");
    publish(volume.path(), "2026_11_21_01", &first_cert, &first_key);

    let kadmit = Kadmit::with_rules(&bundled_rules())
        .args([
            "--tls-cert".as_ref(),
            volume.path().join("tls.crt").as_os_str(),
            "--tls-key".as_ref(),
            volume.path().join("tls.key").as_os_str(),
        ])
        .start();
    let url = kadmit.url("/validate");
    let body = fixture("create-pod.json");
    let send = |client: &reqwest::blocking::Client| {
        client
            .post(&url)
            .header("Content-Type", "application/json")
            .body(body.clone())
            .send()
    };

    // Trusts only the first CA: it can only ever talk to the first
    // certificate, so its later success proves it kept its connection.
    let established = client(&first_ca.roots(), None, Alpn::H2AndHttp1);
    let response = send(&established).expect("first certificate served");
    assert_eq!(response.status(), 200);
    assert_eq!(peer_certificate(&response), der_of(&first_cert));

    publish(volume.path(), "2026_11_21_02", &second_cert, &second_key);

    let fresh = client(&second_ca.roots(), None, Alpn::H2AndHttp1);
    let response = send(&fresh).expect("a new connection gets the new certificate");
    assert_eq!(response.status(), 200);
    assert_eq!(peer_certificate(&response), der_of(&second_cert));

    let response = send(&established).expect("the open connection keeps working");
    assert_eq!(response.status(), 200);
    assert_eq!(peer_certificate(&response), der_of(&first_cert));

    let stale = client(&first_ca.roots(), None, Alpn::H2AndHttp1);
    assert!(
        send(&stale).is_err(),
        "a new connection was still given the old certificate"
    );

    // A second rotation works the same way (the old link target is gone).
    publish(volume.path(), "2026_11_21_03", &first_cert, &first_key);
    let response = send(&client(&first_ca.roots(), None, Alpn::Http1)).expect("third version");
    assert_eq!(peer_certificate(&response), der_of(&first_cert));

    let (status, _, _) = post_json(&fresh, &url, body.clone());
    assert_eq!(status, 200, "the second-CA client's open connection");
    kadmit.assert_no_panic();
}
