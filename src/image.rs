//! Container image references (`[registry[:port]/]path[:tag][@digest]`) split
//! into the parts rules compare.

use crate::rules::ImagePart;

/// The registry of a reference that names none.
pub const DEFAULT_REGISTRY: &str = "docker.io";

/// A parsed image reference, borrowing from the original string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageRef<'a> {
    /// Registry host and port; `docker.io` when the reference names none.
    pub registry: &'a str,
    /// Repository path as written (`nginx`, `team/app`).
    pub repository: &'a str,
    /// The tag, when one is written.
    pub tag: Option<&'a str>,
    /// The digest (`sha256:...`), when one is written.
    pub digest: Option<&'a str>,
}

impl<'a> ImageRef<'a> {
    /// Splits a reference. Returns `None` for an empty or malformed one.
    pub fn parse(reference: &'a str) -> Option<ImageRef<'a>> {
        let reference = reference.trim();
        if reference.is_empty() || reference.contains(char::is_whitespace) {
            return None;
        }
        let (name, digest) = match reference.split_once('@') {
            Some((name, digest)) if !digest.is_empty() => (name, Some(digest)),
            Some(_) => return None,
            None => (reference, None),
        };
        // The first component is a registry when it looks like a host:
        // it has a dot or a port, or is `localhost`.
        let (registry, remainder) = match name.split_once('/') {
            Some((first, rest))
                if first.contains('.') || first.contains(':') || first == "localhost" =>
            {
                (first, rest)
            }
            _ => (DEFAULT_REGISTRY, name),
        };
        // A tag is after the last ':' of the last path component.
        let last_slash = remainder.rfind('/').map(|i| i + 1).unwrap_or(0);
        let (repository, tag) = match remainder[last_slash..].rfind(':') {
            Some(colon) => {
                let split = last_slash + colon;
                let tag = &remainder[split + 1..];
                if tag.is_empty() {
                    return None;
                }
                (&remainder[..split], Some(tag))
            }
            None => (remainder, None),
        };
        if repository.is_empty() || registry.is_empty() {
            return None;
        }
        Some(ImageRef {
            registry,
            repository,
            tag,
            digest,
        })
    }

    /// One part of the reference. The tag of a reference with neither tag nor
    /// digest is `latest`, which is what the container runtime pulls.
    pub fn part(&self, part: ImagePart) -> Option<&'a str> {
        match part {
            ImagePart::Registry => Some(self.registry),
            ImagePart::Repository => Some(self.repository),
            ImagePart::Tag => match (self.tag, self.digest) {
                (Some(tag), _) => Some(tag),
                (None, None) => Some("latest"),
                (None, Some(_)) => None,
            },
            ImagePart::Digest => self.digest,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(reference: &str) -> (Option<&str>, Option<&str>, Option<&str>, Option<&str>) {
        let image = ImageRef::parse(reference).expect("parses");
        (
            image.part(ImagePart::Registry),
            image.part(ImagePart::Repository),
            image.part(ImagePart::Tag),
            image.part(ImagePart::Digest),
        )
    }

    #[test]
    fn splits_references() {
        assert_eq!(
            parts("nginx"),
            (Some("docker.io"), Some("nginx"), Some("latest"), None)
        );
        assert_eq!(
            parts("nginx:1.27"),
            (Some("docker.io"), Some("nginx"), Some("1.27"), None)
        );
        assert_eq!(
            parts("registry.example:5000/team/app:v2"),
            (
                Some("registry.example:5000"),
                Some("team/app"),
                Some("v2"),
                None
            )
        );
        assert_eq!(
            parts("localhost/app@sha256:abc"),
            (Some("localhost"), Some("app"), None, Some("sha256:abc"))
        );
        assert_eq!(
            parts("ghcr.io/o/app:1@sha256:abc"),
            (
                Some("ghcr.io"),
                Some("o/app"),
                Some("1"),
                Some("sha256:abc")
            )
        );
        assert_eq!(
            parts("team/app"),
            (Some("docker.io"), Some("team/app"), Some("latest"), None)
        );
    }

    #[test]
    fn rejects_malformed() {
        for bad in ["", "app:", "app@", "a b", "registry.example/"] {
            assert_eq!(ImageRef::parse(bad), None, "{bad}");
        }
    }
}
