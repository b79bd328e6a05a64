//! Container image references (`[registry[:port]/]path[:tag][@digest]`)
//! normalised the way container runtimes resolve them, and split into the
//! parts rules compare.
//!
//! The grammar and the normalisation follow the reference package of the
//! CNCF distribution project, which the kubelet and containerd both use:
//! a reference that package refuses never runs (the kubelet reports
//! `InvalidImageName`), and every other one names exactly the registry,
//! repository, tag and digest below. On top of that the registry is put in
//! the form a host comparison needs: host names are case-insensitive, `:443`
//! is the port HTTPS uses anyway, and Docker Hub answers under several names.
//! So `EVIL.example:443/x`, `evil.example/x` and `evil.example:0443/x` all
//! have the registry `evil.example`, and `index.docker.io/nginx`,
//! `registry-1.docker.io/library/nginx` and `nginx` all are
//! `docker.io/library/nginx`.

use std::borrow::Cow;
use std::fmt;
use std::net::Ipv6Addr;

use crate::rules::ImagePart;

/// The registry of a reference that names none.
pub const DEFAULT_REGISTRY: &str = "docker.io";

/// The namespace Docker Hub gives single-name repositories (`nginx` is
/// `library/nginx`).
const OFFICIAL_NAMESPACE: &str = "library/";

/// Host names under which Docker Hub serves images, all read as `docker.io`.
/// `index.docker.io` is the alias the distribution reference package itself
/// maps; `registry-1.docker.io` is the endpoint runtimes actually contact for
/// `docker.io` (and `registry.docker.io` its DNS alias);
/// `registry.hub.docker.com` serves the same registry API.
const DOCKER_HUB_ALIASES: &[&str] = &[
    "index.docker.io",
    "registry-1.docker.io",
    "registry.docker.io",
    "registry.hub.docker.com",
];

/// Longest registry-plus-repository name a runtime accepts (distribution's
/// `NameTotalLengthMax`).
pub const MAX_NAME_LEN: usize = 255;

/// Longest tag (distribution's tag grammar: one word character and up to
/// 127 more).
pub const MAX_TAG_LEN: usize = 128;

/// Longest reference worth reading: the longest name, the longest tag and
/// the longest supported digest (`sha512:` and 128 hex digits) with their
/// separators. Anything longer is refused before it is scanned.
pub const MAX_REFERENCE_LEN: usize = MAX_NAME_LEN + 1 + MAX_TAG_LEN + 1 + 7 + 128;

/// Why a string is not an image reference a runtime would pull.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    /// Nothing was written.
    #[error("empty image reference")]
    Empty,
    /// Longer than any valid reference can be.
    #[error("image reference of {len} bytes is longer than {MAX_REFERENCE_LEN}")]
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// The name part is longer than runtimes accept.
    #[error("image name of {len} bytes is longer than {MAX_NAME_LEN}")]
    NameTooLong {
        /// Its length in bytes, as the runtime counts it.
        len: usize,
    },
    /// The registry is not a host name, IPv6 address or port the grammar allows.
    #[error("invalid registry {0:?}")]
    Registry(String),
    /// The repository path has an empty, upper-case or badly separated component.
    #[error("invalid repository {0:?}")]
    Repository(String),
    /// The tag has characters or a length the grammar does not allow.
    #[error("invalid tag {0:?}")]
    Tag(String),
    /// The digest is not a supported algorithm with hex of the right length.
    #[error("invalid digest {0:?}")]
    Digest(String),
    /// A bare 64-digit hex string names an image ID, not a reference.
    #[error("a 64-digit hex string is an image ID, not a reference")]
    ImageId,
}

/// A parsed and normalised image reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRef<'a> {
    /// Registry host, lower case, with its port unless it is 443; `docker.io`
    /// when the reference names none or a Docker Hub alias.
    pub registry: Cow<'a, str>,
    /// Repository path; on Docker Hub, single names are under `library/`.
    pub repository: Cow<'a, str>,
    /// The tag, when one is written (`nginx` has none; `nginx:latest` has `latest`).
    pub tag: Option<&'a str>,
    /// The digest (`sha256:` and 64 lower-case hex digits), when one is written.
    pub digest: Option<&'a str>,
}

impl<'a> ImageRef<'a> {
    /// Parses and normalises a reference, or says why a runtime would refuse it.
    ///
    /// ```
    /// use kadmit::image::ImageRef;
    /// let image = ImageRef::parse("Index.Docker.IO:443/nginx:1.27").unwrap();
    /// assert_eq!(image.to_string(), "docker.io/library/nginx:1.27");
    /// ```
    pub fn parse(reference: &'a str) -> Result<ImageRef<'a>, ImageError> {
        if reference.is_empty() {
            return Err(ImageError::Empty);
        }
        if reference.len() > MAX_REFERENCE_LEN {
            return Err(ImageError::TooLong {
                len: reference.len(),
            });
        }
        if is_image_id(reference) {
            return Err(ImageError::ImageId);
        }
        let (name, digest) = match reference.split_once('@') {
            Some((name, digest)) => {
                check_digest(digest)?;
                (name, Some(digest))
            }
            None => (reference, None),
        };
        // A tag follows the last ':' of the last path component; a ':' before
        // the first '/' is a registry port.
        let last_slash = name.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match name[last_slash..].rfind(':') {
            Some(colon) => {
                let split = last_slash + colon;
                let tag = &name[split + 1..];
                check_tag(tag)?;
                (&name[..split], Some(tag))
            }
            None => (name, None),
        };
        // distribution: the first component is a registry when it has a dot
        // or a port, is `localhost`, or has an upper-case letter (which no
        // repository may have).
        let (written_registry, path) = match name.split_once('/') {
            Some((first, rest))
                if first.contains(['.', ':'])
                    || first == "localhost"
                    || first.bytes().any(|b| b.is_ascii_uppercase()) =>
            {
                (Some(first), rest)
            }
            _ => (None, name),
        };
        check_repository(path)?;
        let registry = match written_registry {
            Some(registry) => normalise_registry(registry)?,
            None => Cow::Borrowed(DEFAULT_REGISTRY),
        };
        // The runtime's length limit applies to its own normalisation, which
        // maps only `index.docker.io` and adds `library/` only there.
        let runtime_hub = matches!(
            written_registry,
            None | Some("docker.io" | "index.docker.io")
        );
        let runtime_len = written_registry.map_or(DEFAULT_REGISTRY.len(), str::len)
            + 1
            + path.len()
            + if runtime_hub && !path.contains('/') {
                OFFICIAL_NAMESPACE.len()
            } else {
                0
            };
        if runtime_len > MAX_NAME_LEN {
            return Err(ImageError::NameTooLong { len: runtime_len });
        }
        let repository = if registry == DEFAULT_REGISTRY && !path.contains('/') {
            Cow::Owned(format!("{OFFICIAL_NAMESPACE}{path}"))
        } else {
            Cow::Borrowed(path)
        };
        Ok(ImageRef {
            registry,
            repository,
            tag,
            digest,
        })
    }

    /// One part of the reference: the tag and the digest only when written.
    pub fn part(&self, part: ImagePart) -> Option<&str> {
        match part {
            ImagePart::Registry => Some(&self.registry),
            ImagePart::Repository => Some(&self.repository),
            ImagePart::Tag => self.tag,
            ImagePart::Digest => self.digest,
        }
    }
}

/// The normalised reference: `registry/repository[:tag][@digest]`, which
/// parses back to the same parts.
impl fmt::Display for ImageRef<'_> {
    /// The canonical text, which parses back to the same parts. A registry
    /// host of one label (`EVIL/app` is pulled from the host `evil`) is
    /// written with the default port, `evil:443/app`: as `evil/app` it
    /// would read as the Docker Hub repository `evil/app`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let single_label = !self.registry.contains(['.', ':', '[']) && self.registry != "localhost";
        if single_label {
            write!(f, "{}:443/{}", self.registry, self.repository)?;
        } else {
            write!(f, "{}/{}", self.registry, self.repository)?;
        }
        if let Some(tag) = self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

fn is_image_id(text: &str) -> bool {
    text.len() == 64
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// `algorithm:hex`, with the algorithms the runtimes support and the hex
/// length each implies, in lower case as the digest package demands.
fn check_digest(digest: &str) -> Result<(), ImageError> {
    let bad = || ImageError::Digest(digest.to_owned());
    let (algorithm, hex) = digest.split_once(':').ok_or_else(bad)?;
    let len = match algorithm {
        "sha256" => 64,
        "sha384" => 96,
        "sha512" => 128,
        _ => return Err(bad()),
    };
    let hex_ok = hex.len() == len
        && hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if hex_ok { Ok(()) } else { Err(bad()) }
}

/// `[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`.
fn check_tag(tag: &str) -> Result<(), ImageError> {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let ok = tag.len() <= MAX_TAG_LEN
        && tag.bytes().next().is_some_and(word)
        && tag.bytes().all(|b| word(b) || b == b'.' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(ImageError::Tag(tag.to_owned()))
    }
}

/// Components separated by `/`, each lower-case alphanumerics joined by
/// `.`, `_`, `__` or any run of `-`.
fn check_repository(path: &str) -> Result<(), ImageError> {
    if path.split('/').all(is_path_component) {
        Ok(())
    } else {
        Err(ImageError::Repository(path.to_owned()))
    }
}

fn is_path_component(component: &str) -> bool {
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let bytes = component.as_bytes();
    let (Some(&first), Some(&last)) = (bytes.first(), bytes.last()) else {
        return false;
    };
    if !alnum(first) || !alnum(last) {
        return false;
    }
    let mut i = 0;
    while i < bytes.len() {
        if alnum(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && !alnum(bytes[i]) {
            i += 1;
        }
        let separator = &bytes[start..i];
        let allowed =
            matches!(separator, b"." | b"_" | b"__") || separator.iter().all(|&b| b == b'-');
        if !allowed {
            return false;
        }
    }
    true
}

/// Host (DNS name or bracketed IPv6 address) and optional port, as a host
/// comparison needs them: lower case, IPv6 in its canonical form, the port
/// as a number and left out when it is 443, Docker Hub's names as `docker.io`.
fn normalise_registry(registry: &str) -> Result<Cow<'_, str>, ImageError> {
    let bad = || ImageError::Registry(registry.to_owned());
    let (host, port) = if let Some(rest) = registry.strip_prefix('[') {
        let (address, after) = rest.split_once(']').ok_or_else(bad)?;
        let port = match after {
            "" => None,
            _ => Some(after.strip_prefix(':').ok_or_else(bad)?),
        };
        let grammar_ok =
            !address.is_empty() && address.bytes().all(|b| b.is_ascii_hexdigit() || b == b':');
        let address: Ipv6Addr = match address.parse() {
            Ok(address) if grammar_ok => address,
            _ => return Err(bad()),
        };
        (Cow::Owned(format!("[{address}]")), port)
    } else {
        let (host, port) = match registry.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (registry, None),
        };
        if !host.split('.').all(is_domain_label) {
            return Err(bad());
        }
        let host = if host.bytes().any(|b| b.is_ascii_uppercase()) {
            Cow::Owned(host.to_ascii_lowercase())
        } else {
            Cow::Borrowed(host)
        };
        (host, port)
    };
    let port = match port {
        None => None,
        Some(digits) => {
            // `[0-9]+` in the grammar; the dialer reads it as a number.
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            // Leading zeros do not change the port the dialer uses.
            let significant = digits.trim_start_matches('0');
            let number = match significant.parse::<u16>() {
                Ok(number) if number > 0 && significant.len() <= 5 => number,
                _ => return Err(bad()),
            };
            (number != 443).then_some(number)
        }
    };
    if port.is_none() && DOCKER_HUB_ALIASES.contains(&host.as_ref()) {
        return Ok(Cow::Borrowed(DEFAULT_REGISTRY));
    }
    Ok(match port {
        None => host,
        Some(port) => Cow::Owned(format!("{host}:{port}")),
    })
}

/// A DNS label: alphanumerics and inner hyphens.
fn is_domain_label(label: &str) -> bool {
    let bytes = label.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || *b == b'-')
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn a_one_label_registry_is_written_so_that_it_reads_back_as_a_registry() {
        // Found by the property test below: "A/0" is the host `a`, but the
        // text "a/0" is the Docker Hub repository `a/0`.
        for written in ["A/0", "EVIL/app:1", "evil:443/app:1"] {
            let image = ImageRef::parse(written).expect("parses");
            assert_eq!(
                image.registry,
                written
                    .split(['/', ':'])
                    .next()
                    .map(str::to_ascii_lowercase)
                    .unwrap_or_default()
            );
            let canonical = image.to_string();
            assert!(canonical.contains(":443/"), "{canonical}");
            assert_eq!(ImageRef::parse(&canonical), Ok(image.clone()), "{written}");
        }
        assert_eq!(
            ImageRef::parse("localhost/app")
                .expect("parses")
                .to_string(),
            "localhost/app"
        );
    }

    fn parts(reference: &str) -> (String, String, Option<String>, Option<String>) {
        let image = ImageRef::parse(reference).expect("parses");
        (
            image.registry.to_string(),
            image.repository.to_string(),
            image.tag.map(str::to_owned),
            image.digest.map(str::to_owned),
        )
    }

    #[test]
    fn normalises() {
        let table: &[(&str, &str, &str, Option<&str>)] = &[
            ("nginx", "docker.io", "library/nginx", None), // bare
            ("nginx:1.27", "docker.io", "library/nginx", Some("1.27")), // tagged
            (
                "docker.io/library/nginx",
                "docker.io",
                "library/nginx",
                None,
            ), // explicit_hub
            ("docker.io/nginx", "docker.io", "library/nginx", None), // hub_short
            (
                "index.docker.io/nginx:1",
                "docker.io",
                "library/nginx",
                Some("1"),
            ), // index_alias
            (
                "registry-1.docker.io/library/nginx",
                "docker.io",
                "library/nginx",
                None,
            ), // endpoint_alias
            (
                "registry.hub.docker.com/team/app",
                "docker.io",
                "team/app",
                None,
            ), // hub_alias
            ("INDEX.DOCKER.IO/nginx", "docker.io", "library/nginx", None), // hub_upper
            ("docker.io:443/nginx", "docker.io", "library/nginx", None), // hub_port_443
            ("docker.io:5000/nginx", "docker.io:5000", "nginx", None), // hub_other_port
            ("team/app", "docker.io", "team/app", None),   // namespaced
            ("EVIL-REGISTRY.COM/x:1", "evil-registry.com", "x", Some("1")), // upper_host
            (
                "evil-registry.com:443/x:1",
                "evil-registry.com",
                "x",
                Some("1"),
            ), // port_443
            ("evil-registry.com:0443/x", "evil-registry.com", "x", None), // port_0443
            (
                "registry.example:5000/team/app:v2",
                "registry.example:5000",
                "team/app",
                Some("v2"),
            ), // port_kept
            (
                "registry.example:05000/app",
                "registry.example:5000",
                "app",
                None,
            ), // port_leading_zero
            ("localhost/app", "localhost", "app", None),   // localhost
            ("localhost:5000/app", "localhost:5000", "app", None), // localhost_port
            ("Registry/app", "registry", "app", None),     // upper_first
            ("[::1]:5000/x", "[::1]:5000", "x", None),     // ipv6
            ("[0:0:0:0:0:0:0:1]/x", "[::1]", "x", None),   // ipv6_long
            ("[FE80::1]:443/x", "[fe80::1]", "x", None),   // ipv6_upper
            ("app:5000", "docker.io", "library/app", Some("5000")), // tag_port_like
            ("a/b.c_d__e---f/g", "docker.io", "a/b.c_d__e---f/g", None), // separators
        ];
        for (reference, registry, repository, tag) in table {
            assert_eq!(
                parts(reference),
                (
                    registry.to_string(),
                    repository.to_string(),
                    tag.map(str::to_owned),
                    None
                ),
                "{reference}"
            );
        }
    }

    #[test]
    fn keeps_tag_and_digest_apart() {
        let with_both = format!("ghcr.io/o/app:1@{SHA}");
        assert_eq!(
            parts(&with_both),
            (
                "ghcr.io".to_owned(),
                "o/app".to_owned(),
                Some("1".to_owned()),
                Some(SHA.to_owned())
            )
        );
        let digest_only = format!("localhost/app@{SHA}");
        let image = ImageRef::parse(&digest_only).unwrap();
        assert_eq!((image.tag, image.digest), (None, Some(SHA)));
        let untagged = ImageRef::parse("nginx").unwrap();
        assert_eq!(untagged.part(ImagePart::Tag), None);
        let latest = ImageRef::parse("nginx:latest").unwrap();
        assert_eq!(latest.part(ImagePart::Tag), Some("latest"));
    }

    #[test]
    fn refuses() {
        let table = [
            "",                                                                             // empty
            "app:",                      // empty_tag
            "app@",                      // empty_digest
            "a b",                       // space
            " nginx",                    // leading_space
            "nginx\n",                   // trailing_newline
            "registry.example/",         // empty_path
            "registry.example/Team/app", // upper_path
            "Nginx",                     // upper_single
            "evil.example./x",           // trailing_dot_host
            "evil..example/x",           // empty_label
            "-evil.example/x",           // hyphen_label
            "evil.example:/x",           // empty_port
            "evil.example:https/x",      // port_letters
            "evil.example:65536/x",      // port_too_big
            "evil.example:0/x",          // port_zero
            "[::1/x",                    // ipv6_unclosed
            "[::g]/x",                   // ipv6_garbage
            "[::ffff:1.2.3.4]/x",        // ipv6_dotted
            "évil.example/x",            // unicode_host
            "registry.example/äpp",      // unicode_path
            "ｎｇｉｎｘ",                // fullwidth
            "registry.example//app",     // double_slash
            "app-",                      // path_trailing_separator
            "a..b",                      // path_two_dots
            "app:.1",                    // tag_leading_dot
            "app:1+2",                   // tag_plus
            "app@sha256:abc",            // digest_short
            "app@sha256:0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef", // digest_upper_hex
            "app@SHA256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", // digest_upper_algorithm
            "app@md5:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", // digest_unknown_algorithm
            "app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0", // digest_too_long
            "app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", // two_digests
            "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", // image_id
        ];
        for reference in table {
            assert!(ImageRef::parse(reference).is_err(), "{reference:?}");
        }
    }

    #[test]
    fn bounds_the_length() {
        let name_at_limit = format!("registry.example/{}", "a".repeat(MAX_NAME_LEN - 17));
        assert!(ImageRef::parse(&name_at_limit).is_ok());
        let name_over = format!("registry.example/{}", "a".repeat(MAX_NAME_LEN - 16));
        assert_eq!(
            ImageRef::parse(&name_over),
            Err(ImageError::NameTooLong {
                len: MAX_NAME_LEN + 1
            })
        );
        // `docker.io/library/` counts, as the runtime adds it.
        let hub_over = "a".repeat(MAX_NAME_LEN - 17);
        assert!(matches!(
            ImageRef::parse(&hub_over),
            Err(ImageError::NameTooLong { .. })
        ));
        let tag_at_limit = format!("app:{}", "t".repeat(MAX_TAG_LEN));
        assert!(ImageRef::parse(&tag_at_limit).is_ok());
        let tag_over = format!("app:{}", "t".repeat(MAX_TAG_LEN + 1));
        assert!(matches!(
            ImageRef::parse(&tag_over),
            Err(ImageError::Tag(_))
        ));
        let huge = "a".repeat(1 << 20);
        assert_eq!(
            ImageRef::parse(&huge),
            Err(ImageError::TooLong { len: 1 << 20 })
        );
    }

    #[test]
    fn displays_the_normalised_reference() {
        let image = ImageRef::parse("Registry-1.Docker.IO:443/nginx:1.27").unwrap();
        assert_eq!(image.to_string(), "docker.io/library/nginx:1.27");
        let reparsed = image.to_string();
        assert_eq!(ImageRef::parse(&reparsed).unwrap(), image);
    }

    mod properties {
        use proptest::prelude::*;

        use super::super::*;

        /// A path component: alphanumerics joined by the allowed separators.
        fn component() -> impl Strategy<Value = String> {
            "[a-z0-9]{1,4}((\\.|_|__|-{1,2})[a-z0-9]{1,4}){0,2}"
        }

        /// A host, written in lower case, with the spellings a runtime
        /// resolves to the same host (case, :443, leading zeros) beside it.
        fn host() -> impl Strategy<Value = (String, String)> {
            let names = prop_oneof![
                Just("registry.example".to_owned()),
                Just("localhost".to_owned()),
                Just("ghcr.io".to_owned()),
                "[a-z][a-z0-9-]{0,6}[a-z0-9]\\.[a-z]{2,3}",
            ];
            (names, any::<u64>(), 0..4u8).prop_map(|(name, case_bits, port_style)| {
                let respelled: String = name
                    .chars()
                    .enumerate()
                    .map(|(i, c)| {
                        if case_bits >> (i % 64) & 1 == 1 {
                            c.to_ascii_uppercase()
                        } else {
                            c
                        }
                    })
                    .collect();
                let respelled = match port_style {
                    0 => respelled,
                    1 => format!("{respelled}:443"),
                    2 => format!("{respelled}:0443"),
                    _ => format!("{respelled}:00443"),
                };
                (name, respelled)
            })
        }

        fn tag() -> impl Strategy<Value = Option<String>> {
            proptest::option::of("[A-Za-z0-9_][A-Za-z0-9_.-]{0,12}")
        }

        fn digest() -> impl Strategy<Value = Option<String>> {
            proptest::option::of(prop_oneof![
                "[0-9a-f]{64}".prop_map(|hex| format!("sha256:{hex}")),
                "[0-9a-f]{96}".prop_map(|hex| format!("sha384:{hex}")),
                "[0-9a-f]{128}".prop_map(|hex| format!("sha512:{hex}")),
            ])
        }

        fn suffix(tag: &Option<String>, digest: &Option<String>) -> String {
            let mut text = String::new();
            if let Some(tag) = tag {
                text.push(':');
                text.push_str(tag);
            }
            if let Some(digest) = digest {
                text.push('@');
                text.push_str(digest);
            }
            text
        }

        /// A Docker Hub repository, written as the canonical reference and
        /// as one of the spellings runtimes pull from Docker Hub.
        fn hub() -> impl Strategy<Value = (String, String)> {
            let aliases = prop_oneof![
                Just(""),
                Just("docker.io/"),
                Just("Docker.IO:443/"),
                Just("index.docker.io/"),
                Just("INDEX.docker.io/"),
                Just("registry-1.docker.io/"),
                Just("registry.docker.io:443/"),
                Just("registry.hub.docker.com/"),
            ];
            // Without a registry, a first component with a dot would be one.
            let namespace = "[a-z0-9]{1,4}((_|__|-{1,2})[a-z0-9]{1,4}){0,2}";
            (
                aliases,
                component(),
                any::<bool>(),
                proptest::option::of(namespace),
            )
                .prop_map(|(alias, name, write_library, namespace)| match namespace {
                    Some(namespace) => (
                        format!("docker.io/{namespace}/{name}"),
                        format!("{alias}{namespace}/{name}"),
                    ),
                    None => (
                        format!("docker.io/library/{name}"),
                        if write_library {
                            format!("{alias}library/{name}")
                        } else {
                            format!("{alias}{name}")
                        },
                    ),
                })
        }

        /// (canonical spelling, equivalent spelling) of one reference.
        fn spellings() -> impl Strategy<Value = (String, String)> {
            let named = (host(), proptest::collection::vec(component(), 1..4)).prop_map(
                |((host, respelled), path)| {
                    let path = path.join("/");
                    (format!("{host}/{path}"), format!("{respelled}/{path}"))
                },
            );
            (prop_oneof![named, hub()], tag(), digest()).prop_map(
                |((canonical, respelled), tag, digest)| {
                    let suffix = suffix(&tag, &digest);
                    (
                        format!("{canonical}{suffix}"),
                        format!("{respelled}{suffix}"),
                    )
                },
            )
        }

        proptest! {
            #[test]
            fn equivalent_spellings_yield_equal_parts((canonical, respelled) in spellings()) {
                let expected = ImageRef::parse(&canonical);
                prop_assert!(expected.is_ok(), "{canonical}: {expected:?}");
                prop_assert_eq!(ImageRef::parse(&respelled), expected);
            }

            #[test]
            fn normalisation_is_idempotent_and_parts_reassemble((_, respelled) in spellings()) {
                let image = ImageRef::parse(&respelled).map_err(|e| TestCaseError::fail(format!("{respelled}: {e}")))?;
                let normalised = image.to_string();
                // The canonical text is written out of the parts alone.
                let assembled = format!(
                    "{}/{}{}",
                    image.registry,
                    image.repository,
                    suffix(&image.tag.map(str::to_owned), &image.digest.map(str::to_owned)),
                );
                prop_assert_eq!(&normalised, &assembled);
                let again = ImageRef::parse(&normalised).map_err(|e| TestCaseError::fail(format!("{normalised}: {e}")))?;
                prop_assert_eq!(&again, &image);
                prop_assert_eq!(again.to_string(), normalised);
            }

            #[test]
            fn any_text_parses_or_is_refused_and_what_parses_is_stable(text in "[a-zA-Z0-9.:/@_\\[\\]-]{0,40}|\\PC{0,20}") {
                if let Ok(image) = ImageRef::parse(&text) {
                    let normalised = image.to_string();
                    let again = ImageRef::parse(&normalised);
                    prop_assert_eq!(again, Ok(image.clone()), "{}", text);
                    prop_assert!(normalised.is_ascii());
                    prop_assert!(!image.registry.is_empty() && !image.repository.is_empty());
                }
            }
        }
    }
}
