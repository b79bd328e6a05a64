//! The fields of custom resources, read from an OpenAPI v3 document
//! (`kubectl get --raw /openapi/v3/apis/GROUP/VERSION`) or from
//! CustomResourceDefinitions (their `openAPIV3Schema`), for `kadmit check
//! --openapi`.
//!
//! The file is input like a rule file: read under a size bound, then, as
//! JSON, parsed by serde_json (no aliases, bounded depth), or, as YAML,
//! through [`crate::rules::limits::check_structure`] (depth, aliases, nodes)
//! before any parser expands it.

use std::collections::HashMap;
use std::path::Path;

use serde_json::{Map, Value};

use super::fields::{Fields, Kind};
use crate::rules::limits;
use crate::rules::{Diagnostic, ReadProblem, read_bounded};

/// Largest OpenAPI file read, in bytes: the OpenAPI document of a group of
/// large custom resources runs to a few megabytes; an object the API server
/// stores (a CRD) is at most about 1.5 MiB.
pub const MAX_OPENAPI_BYTES: u64 = 8 << 20;

/// Most memory an OpenAPI file in JSON may take once parsed, as
/// [`crate::review::parsed_size_estimate`] counts it from its text before
/// parsing: real documents take a few times their size, but 8 MiB of
/// small maps took 728 MB.
pub const MAX_OPENAPI_PARSED_BYTES: usize = 256 << 20;

/// Why an OpenAPI file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum OpenApiError {
    /// It does not exist, is not a readable regular file, or is not UTF-8.
    #[error("cannot read {file}: {reason}")]
    Read {
        /// The file.
        file: String,
        /// Why.
        reason: String,
    },
    /// It is larger than [`MAX_OPENAPI_BYTES`].
    #[error(
        "{file} is {bytes} bytes, more than the {MAX_OPENAPI_BYTES} an OpenAPI file may have (pass one group version or one CRD per file)"
    )]
    TooLarge {
        /// The file.
        file: String,
        /// Its size, or more.
        bytes: u64,
    },
    /// It crosses a bound of [`limits`] (nesting depth, aliases, nodes), or
    /// is not YAML.
    #[error("{0}")]
    Bounds(Box<Diagnostic>),
    /// It does not parse.
    #[error("{file} is not valid YAML or JSON: {reason}")]
    Parse {
        /// The file.
        file: String,
        /// The parser's message.
        reason: String,
    },
    /// It holds no kind: neither an OpenAPI v3 document with resources nor
    /// a CustomResourceDefinition.
    #[error(
        "{file} describes no kind: expected an OpenAPI v3 document with paths and components.schemas (kubectl get --raw /openapi/v3/apis/GROUP/VERSION) or CustomResourceDefinitions with openAPIV3Schema"
    )]
    NoKinds {
        /// The file.
        file: String,
    },
}

/// Reads the kinds of the OpenAPI document or CRDs at `path`.
pub fn read(path: &Path) -> Result<Fields, OpenApiError> {
    let file = path.display().to_string();
    let text = match read_bounded(path, MAX_OPENAPI_BYTES) {
        Ok(Some(text)) => text,
        Ok(None) => {
            return Err(OpenApiError::Read {
                file,
                reason: "no such file".to_owned(),
            });
        }
        Err(ReadProblem::TooLarge(bytes)) => return Err(OpenApiError::TooLarge { file, bytes }),
        Err(ReadProblem::Directory) => {
            return Err(OpenApiError::Read {
                file,
                reason: "is a directory".to_owned(),
            });
        }
        Err(ReadProblem::NotUtf8(reason) | ReadProblem::Unreadable(reason)) => {
            return Err(OpenApiError::Read { file, reason });
        }
    };
    parse(&file, &text)
}

/// The kinds in `text` (named `file` in errors): an OpenAPI v3 document,
/// or one or more CRDs (also as a `List`), YAML or JSON.
pub fn parse(file: &str, text: &str) -> Result<Fields, OpenApiError> {
    if text.len() as u64 > MAX_OPENAPI_BYTES {
        return Err(OpenApiError::TooLarge {
            file: file.to_owned(),
            bytes: text.len() as u64,
        });
    }
    let parse_error = |reason: String| OpenApiError::Parse {
        file: file.to_owned(),
        reason,
    };
    let documents: Vec<Value> = if text.trim_start().starts_with('{') {
        if crate::review::may_parse_over(text.as_bytes(), MAX_OPENAPI_PARSED_BYTES) {
            return Err(OpenApiError::Bounds(Box::new(Diagnostic::error(
                file,
                1,
                1,
                format!(
                    "the JSON would take more than {MAX_OPENAPI_PARSED_BYTES} bytes (256 MiB) \
                     once parsed"
                ),
                "give the OpenAPI document of one API group, or the CRDs themselves",
            ))));
        }
        vec![serde_json::from_str(text).map_err(|e| parse_error(e.to_string()))?]
    } else {
        // JSON has no aliases, and serde_json bounds its depth; YAML is
        // checked before the deserializer expands it.
        if let Some(diagnostic) = limits::check_structure(file, text, limits::MAX_TOTAL_NODES) {
            return Err(OpenApiError::Bounds(Box::new(diagnostic)));
        }
        serde_yaml::Deserializer::from_str(text)
            .map(|document| {
                serde::Deserialize::deserialize(document).map_err(|e| parse_error(e.to_string()))
            })
            .collect::<Result<_, _>>()?
    };
    let mut fields = Fields::default();
    for document in &documents {
        collect(document, &mut fields);
    }
    if fields.kinds().is_empty() {
        return Err(OpenApiError::NoKinds {
            file: file.to_owned(),
        });
    }
    Ok(fields)
}

fn collect(document: &Value, fields: &mut Fields) {
    let text = |value: &Value, pointer: &str| {
        value
            .pointer(pointer)
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    match document.get("kind").and_then(Value::as_str) {
        Some("List" | "CustomResourceDefinitionList") => {
            for item in document
                .get("items")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                collect(item, fields);
            }
        }
        Some("CustomResourceDefinition") => {
            let (Some(group), Some(resource), Some(kind)) = (
                text(document, "/spec/group"),
                text(document, "/spec/names/plural"),
                text(document, "/spec/names/kind"),
            ) else {
                return;
            };
            let versions = document
                .pointer("/spec/versions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten();
            let mut roots = Vec::new();
            for version in versions {
                let served = version.get("served").and_then(Value::as_bool) != Some(false);
                let (Some(name), Some(schema)) = (
                    text(version, "/name"),
                    version.pointer("/schema/openAPIV3Schema"),
                ) else {
                    continue;
                };
                if served {
                    // A custom resource always has `apiVersion`, `kind`
                    // and `metadata`, which many CRDs leave out of their
                    // schema: its root is an embedded resource.
                    let mut schema = schema.clone();
                    if let Some(root) = schema.as_object_mut() {
                        root.insert(
                            "x-kubernetes-embedded-resource".to_owned(),
                            Value::Bool(true),
                        );
                    }
                    roots.push((Kind::new(&group, &name, &resource, &kind), schema));
                }
            }
            fields.extend(Fields::from_schemas(&Map::new(), roots));
        }
        _ => {
            let Some(schemas) = document
                .pointer("/components/schemas")
                .and_then(Value::as_object)
            else {
                return;
            };
            let resources = resources_of_paths(document);
            let mut roots = Vec::new();
            for (name, schema) in schemas {
                let kinds = schema
                    .get("x-kubernetes-group-version-kind")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten();
                for gvk in kinds {
                    let key = (
                        text(gvk, "/group").unwrap_or_default(),
                        text(gvk, "/version").unwrap_or_default(),
                        text(gvk, "/kind").unwrap_or_default(),
                    );
                    if let Some(resource) = resources.get(&key) {
                        let reference =
                            serde_json::json!({ "$ref": format!("#/components/schemas/{name}") });
                        roots.push((Kind::new(&key.0, &key.1, resource, &key.2), reference));
                    }
                }
            }
            fields.extend(Fields::from_schemas(schemas, roots));
        }
    }
}

/// `(group, version, kind)` → plural resource name, from the operations of
/// an OpenAPI document's `paths` (`/apis/GROUP/VERSION/namespaces/{namespace}/PLURAL`);
/// subresources' paths are left out.
fn resources_of_paths(document: &Value) -> HashMap<(String, String, String), String> {
    let mut resources = HashMap::new();
    let Some(paths) = document.get("paths").and_then(Value::as_object) else {
        return resources;
    };
    for (path, item) in paths {
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let rest = match segments.as_slice() {
            ["apis", _, _, rest @ ..] | ["api", _, rest @ ..] => rest,
            _ => continue,
        };
        let rest = match rest {
            ["watch", rest @ ..] => rest,
            rest => rest,
        };
        let rest = match rest {
            ["namespaces", namespace, rest @ ..] if namespace.starts_with('{') => rest,
            rest => rest,
        };
        let (resource, plain) = match rest {
            [resource] => (*resource, true),
            [resource, name] => (*resource, name.starts_with('{')),
            _ => continue,
        };
        if !plain || resource.starts_with('{') {
            continue;
        }
        let operations = item.as_object().into_iter().flat_map(|item| item.values());
        for operation in operations {
            let Some(gvk) = operation.get("x-kubernetes-group-version-kind") else {
                continue;
            };
            let part = |key: &str| {
                gvk.get(key)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            };
            resources
                .entry((part("group"), part("version"), part("kind")))
                .or_insert_with(|| resource.to_owned());
        }
    }
    resources
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::fields::Walk;
    use crate::plan::path::Step;

    fn steps(text: &str) -> Vec<Step> {
        text.split('.')
            .map(|part| match part {
                "*" => Step::Wildcard,
                key => Step::Key(std::sync::Arc::from(key)),
            })
            .collect()
    }

    const CRD: &str = "
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  names: {plural: widgets, kind: Widget}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                size: {type: integer}
                parts: {type: array, items: {type: object, properties: {name: {type: string}}}}
                extra: {type: object, x-kubernetes-preserve-unknown-fields: true}
";

    #[test]
    fn reads_a_crd() {
        let fields = parse("crd.yaml", CRD).expect("a CRD");
        let kind = fields.kinds_of("example.com", "widgets")[0];
        assert_eq!(kind.label(), "Widget (example.com/v1)");
        let root = [fields.root(kind)];
        assert!(matches!(
            fields.walk(&root, &steps("spec.parts.*.name")),
            Walk::Reached(_)
        ));
        assert!(matches!(
            fields.walk(&root, &steps("spec.extra.anything")),
            Walk::Unknown
        ));
        assert!(matches!(
            fields.walk(&root, &steps("spec.sise")),
            Walk::Missing(_)
        ));
        // The schema leaves out what every object has, which the API
        // server fills in: they are fields all the same.
        for path in ["metadata.labels.team", "kind", "apiVersion"] {
            assert!(
                !matches!(fields.walk(&root, &steps(path)), Walk::Missing(_)),
                "{path}"
            );
        }
        let Walk::Reached(kind_types) = fields.walk(&root, &steps("kind")) else {
            panic!("kind");
        };
        assert!(fields.scalars(&kind_types).is_some());
    }

    #[test]
    fn reads_an_openapi_document() {
        let document = serde_json::json!({
            "openapi": "3.0.0",
            "paths": {
                "/apis/example.com/v1/namespaces/{namespace}/gadgets": {
                    "get": {"x-kubernetes-group-version-kind": {"group": "example.com", "version": "v1", "kind": "Gadget"}}
                },
                "/apis/example.com/v1/namespaces/{namespace}/gadgets/{name}/status": {
                    "get": {"x-kubernetes-group-version-kind": {"group": "example.com", "version": "v1", "kind": "Gadget"}}
                }
            },
            "components": {"schemas": {
                "com.example.v1.Gadget": {
                    "type": "object",
                    "properties": {"spec": {"allOf": [{"$ref": "#/components/schemas/com.example.v1.GadgetSpec"}]}},
                    "x-kubernetes-group-version-kind": [{"group": "example.com", "version": "v1", "kind": "Gadget"}]
                },
                "com.example.v1.GadgetSpec": {"type": "object", "properties": {"color": {"type": "string"}}}
            }}
        });
        let fields = parse("gadgets.json", &document.to_string()).expect("a document");
        let kind = fields.kinds_of("example.com", "gadgets")[0];
        let root = [fields.root(kind)];
        assert!(matches!(
            fields.walk(&root, &steps("spec.color")),
            Walk::Reached(_)
        ));
        assert!(matches!(
            fields.walk(&root, &steps("spec.colour")),
            Walk::Missing(_)
        ));
    }

    #[test]
    fn a_json_document_is_read_past_the_bounds_of_rule_files() {
        // 100,000 properties: 300,000 nodes, over the 100,000 a rule file
        // may hold, and one flow collection the YAML parser would read
        // whole. serde_json reads it in proportion to its size.
        let properties: serde_json::Map<String, Value> = (0..100_000)
            .map(|i| (format!("p{i}"), serde_json::json!({"type": "string"})))
            .collect();
        let document = serde_json::json!({
            "openapi": "3.0.0",
            "paths": {"/apis/example.com/v1/gadgets": {
                "get": {"x-kubernetes-group-version-kind": {"group": "example.com", "version": "v1", "kind": "Gadget"}}
            }},
            "components": {"schemas": {"com.example.v1.Gadget": {
                "type": "object",
                "properties": {"spec": {"type": "object", "properties": properties}},
                "x-kubernetes-group-version-kind": [{"group": "example.com", "version": "v1", "kind": "Gadget"}]
            }}}
        });
        let fields = parse("gadgets.json", &document.to_string()).expect("a document");
        let kind = fields.kinds_of("example.com", "gadgets")[0];
        let root = [fields.root(kind)];
        assert!(matches!(
            fields.walk(&root, &steps("spec.p99999")),
            Walk::Reached(_)
        ));
    }

    #[test]
    fn refuses_files_over_the_bounds_and_files_without_kinds() {
        let deep = format!("{}1{}", "[".repeat(100), "]".repeat(100));
        assert!(matches!(
            parse("deep.json", &deep),
            Err(OpenApiError::Bounds(_))
        ));
        let aliases = format!("a: &a [x]\nb: [{}]\n", vec!["*a"; 2000].join(", "));
        assert!(matches!(
            parse("aliases.yaml", &aliases),
            Err(OpenApiError::Bounds(_))
        ));
        assert!(matches!(
            parse("empty.yaml", "kind: ConfigMap\n"),
            Err(OpenApiError::NoKinds { .. })
        ));
        // 4 MiB of one-key maps: about 350 MB once parsed.
        let maps = format!("{{\"a\":[{}]}}", vec!["{\"a\":0}"; 500_000].join(","));
        let refused = parse("maps.json", &maps).expect_err("refused");
        assert!(
            refused
                .to_string()
                .contains("more than 268435456 bytes (256 MiB) once parsed"),
            "{refused}"
        );
        let large = " ".repeat(usize::try_from(MAX_OPENAPI_BYTES).unwrap_or(0) + 1);
        assert!(matches!(
            parse("large.yaml", &large),
            Err(OpenApiError::TooLarge { .. })
        ));
    }
}
