//! Conditions as written in rule files: one operator on the values at a
//! path, a CEL expression, or `any` / `all` / `not` of other conditions.
//!
//! A condition is a YAML map whose keys say which kind it is
//! (`{path: $.object.spec.hostNetwork, equals: true}`,
//! `{cel: "object.spec.hostNetwork"}`, `{any: [...]}`), so it is read key
//! by key into one [`Condition`] value: exactly one operator, and a path
//! only where an operator takes one. Deny entries share these keys with
//! their own (`message`, `forEach`, ...), which is why the reading is done
//! here by hand rather than by a derive (serde cannot combine `flatten`
//! with `deny_unknown_fields`). Every operator is listed once, in
//! [`operators!`], which gives its key, its value type and its schema.

use std::fmt;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::{self, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use super::ImagePart;

/// A condition: one operator on a path, a CEL expression, or `any` / `all`
/// / `not` of other conditions.
#[derive(Debug, Clone, PartialEq)]
pub enum Condition {
    /// An operator on the values `path` selects (or on one part of the image
    /// references they hold).
    Test {
        /// JSONPath of the value(s) to test (RFC 9535): `$.object...`,
        /// `$.oldObject...`, `$.request...`, `$.podSpec...`; inside
        /// `forEach`, `$` is the element and `$$` the whole document.
        path: String,
        /// Compare one part of the image reference held at `path`.
        image: Option<ImagePart>,
        /// What must hold.
        operator: Operator,
    },
    /// A CEL expression that yields a bool.
    Cel(String),
    /// At least one of these conditions holds.
    Any(Vec<Condition>),
    /// All of these conditions hold.
    All(Vec<Condition>),
    /// This condition does not hold.
    Not(Box<Condition>),
}

/// Declares [`Operator`]: each line is the key in the rule file, the
/// variant, its value type, and the description the schema shows.
macro_rules! operators {
    ($($key:literal => $variant:ident($ty:ty), $doc:literal;)*) => {
        /// The operator of a [`Condition::Test`], with its operand as written.
        #[derive(Debug, Clone, PartialEq)]
        pub enum Operator {
            $(#[doc = $doc] $variant($ty),)*
        }

        impl Operator {
            /// Every operator's key, in the order of the schema.
            pub const KEYS: &'static [&'static str] = &[$($key),*];

            /// The key the operator is written with.
            pub fn key(&self) -> &'static str {
                match self {
                    $(Operator::$variant(_) => $key,)*
                }
            }

            /// Reads the operator written with `key` from the map's next
            /// value; `None` when `key` names no operator.
            fn read<'de, A: MapAccess<'de>>(key: &str, map: &mut A) -> Result<Option<Self>, A::Error> {
                match key {
                    $($key => map.next_value().map(|value| Some(Operator::$variant(value))),)*
                    _ => Ok(None),
                }
            }

            fn serialize_into<M: SerializeMap>(&self, map: &mut M) -> Result<(), M::Error> {
                match self {
                    $(Operator::$variant(value) => map.serialize_entry($key, value),)*
                }
            }

            fn schema_properties(generator: &mut SchemaGenerator, properties: &mut Map<String, Value>) {
                $(
                    let mut schema = generator.subschema_for::<$ty>();
                    schema.insert("description".to_owned(), Value::from($doc));
                    properties.insert($key.to_owned(), schema.to_value());
                )*
            }
        }
    };
}

operators! {
    "exists" => Exists(bool), "`true`: the path selects at least one value.";
    "absent" => Absent(bool), "`true`: the path selects nothing.";
    "equals" => Equals(Value), "A selected value equals this JSON value (typed: `\"true\"` is not `true`), or the value at `{path: ...}`.";
    "notEquals" => NotEquals(Value), "A selected value differs from this value (or the value at `{path: ...}`).";
    "in" => In(Vec<Value>), "A selected value is one of these.";
    "notIn" => NotIn(Vec<Value>), "A selected value is none of these.";
    "matches" => Matches(String), "A selected string contains a match of this regex (unanchored).";
    "notMatches" => NotMatches(String), "A selected string contains no match of this regex.";
    "startsWith" => StartsWith(Vec<String>), "A selected string starts with one of these prefixes.";
    "notStartsWith" => NotStartsWith(Vec<String>), "A selected string starts with none of these prefixes.";
    "greaterThan" => GreaterThan(Value), "A selected number or quantity (`500m`, `1Gi`) is greater.";
    "greaterOrEqual" => GreaterOrEqual(Value), "A selected number or quantity is greater or equal.";
    "lessThan" => LessThan(Value), "A selected number or quantity is less.";
    "lessOrEqual" => LessOrEqual(Value), "A selected number or quantity is less or equal.";
    "contains" => Contains(Value), "A selected list holds this value (an absent list is empty).";
    "containsAny" => ContainsAny(Value), "A selected list holds at least one of these values.";
    "subsetOf" => SubsetOf(Value), "Every element of a selected list is one of these values.";
}

/// The keys of a condition besides the operators.
const STRUCTURE_KEYS: [&str; 6] = ["path", "image", "cel", "any", "all", "not"];

/// The keys of a deny entry besides the condition's.
const DENY_KEYS: [&str; 6] = [
    "message",
    "messageExpression",
    "forEach",
    "entries",
    "as",
    "deny",
];

/// A condition's keys as read from one map, before they are checked to
/// make one condition.
#[derive(Default)]
struct Parts {
    path: Option<String>,
    image: Option<ImagePart>,
    cel: Option<String>,
    any: Option<Vec<Condition>>,
    all: Option<Vec<Condition>>,
    not: Option<Box<Condition>>,
    operators: Vec<Operator>,
}

impl Parts {
    /// Reads the value of `key` when it is a condition key; `false` when
    /// it is not one.
    fn read<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error> {
        match key {
            "path" => self.path = Some(map.next_value()?),
            "image" => self.image = Some(map.next_value()?),
            "cel" => self.cel = Some(map.next_value()?),
            "any" => self.any = Some(map.next_value()?),
            "all" => self.all = Some(map.next_value()?),
            "not" => self.not = Some(map.next_value()?),
            _ => match Operator::read(key, map)? {
                Some(operator) => self.operators.push(operator),
                None => return Ok(false),
            },
        }
        Ok(true)
    }

    fn is_empty(&self) -> bool {
        self.path.is_none()
            && self.image.is_none()
            && self.cel.is_none()
            && self.any.is_none()
            && self.all.is_none()
            && self.not.is_none()
            && self.operators.is_empty()
    }

    /// The one condition these keys make, or what is wrong with them.
    fn into_condition(mut self) -> Result<Condition, String> {
        let mut kinds: Vec<&str> = Vec::new();
        for (key, present) in [
            ("cel", self.cel.is_some()),
            ("any", self.any.is_some()),
            ("all", self.all.is_some()),
            ("not", self.not.is_some()),
        ] {
            if present {
                kinds.push(key);
            }
        }
        kinds.extend(self.operators.iter().map(Operator::key));
        if kinds.len() > 1 {
            return Err(format!(
                "condition has several operators: {}; give one, or combine conditions \
                 with all / any / not",
                kinds.join(", ")
            ));
        }
        if let Some(operator) = self.operators.pop() {
            let Some(path) = self.path else {
                return Err(format!(
                    "{} needs a path, e.g. path: $.object...",
                    operator.key()
                ));
            };
            return Ok(Condition::Test {
                path,
                image: self.image,
                operator,
            });
        }
        if let Some(kind) = kinds.first()
            && (self.path.is_some() || self.image.is_some())
        {
            let fix = if *kind == "cel" {
                "read the value in the expression, e.g. object.spec.x"
            } else {
                "put the path on the inner conditions"
            };
            return Err(format!("{kind} takes no path; {fix}"));
        }
        if let Some(source) = self.cel {
            Ok(Condition::Cel(source))
        } else if let Some(list) = self.any {
            Ok(Condition::Any(list))
        } else if let Some(list) = self.all {
            Ok(Condition::All(list))
        } else if let Some(inner) = self.not {
            Ok(Condition::Not(inner))
        } else {
            Err(
                "condition has no operator: give one operator (exists, equals, in, matches, \
                 greaterThan, contains, ...), a cel expression, or combine conditions with \
                 all / any / not"
                    .to_owned(),
            )
        }
    }
}

/// Every key a condition may have, for "unknown field" messages.
fn condition_keys() -> &'static [&'static str] {
    static KEYS: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    KEYS.get_or_init(|| {
        STRUCTURE_KEYS
            .iter()
            .chain(Operator::KEYS)
            .copied()
            .collect()
    })
}

/// Every key a deny entry may have.
fn deny_entry_keys() -> &'static [&'static str] {
    static KEYS: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    KEYS.get_or_init(|| {
        DENY_KEYS
            .iter()
            .chain(&STRUCTURE_KEYS)
            .chain(Operator::KEYS)
            .copied()
            .collect()
    })
}

impl<'de> Deserialize<'de> for Condition {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ConditionVisitor;
        impl<'de> Visitor<'de> for ConditionVisitor {
            type Value = Condition;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a condition (a map with one operator)")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Condition, A::Error> {
                let mut parts = Parts::default();
                while let Some(key) = map.next_key::<String>()? {
                    if !parts.read(&key, &mut map)? {
                        return Err(de::Error::unknown_field(&key, condition_keys()));
                    }
                }
                parts.into_condition().map_err(de::Error::custom)
            }
        }
        deserializer.deserialize_map(ConditionVisitor)
    }
}

impl Serialize for Condition {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        serialize_condition(self, &mut map)?;
        map.end()
    }
}

fn serialize_condition<M: SerializeMap>(
    condition: &Condition,
    map: &mut M,
) -> Result<(), M::Error> {
    match condition {
        Condition::Test {
            path,
            image,
            operator,
        } => {
            map.serialize_entry("path", path)?;
            if let Some(image) = image {
                map.serialize_entry("image", image)?;
            }
            operator.serialize_into(map)
        }
        Condition::Cel(source) => map.serialize_entry("cel", source),
        Condition::Any(list) => map.serialize_entry("any", list),
        Condition::All(list) => map.serialize_entry("all", list),
        Condition::Not(inner) => map.serialize_entry("not", inner),
    }
}

/// Adds `schema` as property `key`, with `description`.
fn describe(properties: &mut Map<String, Value>, key: &str, mut schema: Value, description: &str) {
    if let Some(object) = schema.as_object_mut() {
        object.insert("description".to_owned(), Value::from(description));
    }
    properties.insert(key.to_owned(), schema);
}

/// The schema properties every condition has.
fn condition_properties(generator: &mut SchemaGenerator) -> Map<String, Value> {
    let mut properties = Map::new();
    let condition = generator.subschema_for::<Condition>().to_value();
    let mut put = |key: &str, schema: Value, description: &str| {
        describe(&mut properties, key, schema, description);
    };
    put(
        "path",
        json_schema!({"type": "string"}).to_value(),
        "JSONPath of the value(s) to test (RFC 9535): `$.object...`, `$.oldObject...`, \
         `$.request...`, `$.podSpec...`; inside `forEach`, `$` is the element and `$$` the \
         whole document.",
    );
    put(
        "image",
        generator.subschema_for::<ImagePart>().to_value(),
        "Compare one part of the image reference held at `path`.",
    );
    put(
        "cel",
        json_schema!({"type": "string"}).to_value(),
        "A CEL expression that yields a bool, with the variables `object`, `oldObject`, \
         `request`, and inside `forEach` `element` and the names bound with `as`.",
    );
    put(
        "any",
        json_schema!({"type": "array", "items": condition.clone()}).to_value(),
        "At least one of these conditions holds.",
    );
    put(
        "all",
        json_schema!({"type": "array", "items": condition.clone()}).to_value(),
        "All of these conditions hold.",
    );
    put("not", condition, "This condition does not hold.");
    Operator::schema_properties(generator, &mut properties);
    properties
}

impl JsonSchema for Condition {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Condition".into()
    }
    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let properties = condition_properties(generator);
        json_schema!({
            "description": "A condition: one operator on a path, a CEL expression, or any / all / not.",
            "type": "object",
            "properties": properties,
            "additionalProperties": false
        })
    }
}

/// A deny entry: a condition with a message, a message alone (always
/// violated when the rule matches), or a `forEach` over a list with its own
/// entries.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DenyEntry {
    /// When the entry denies; `None`: whenever the rule matches.
    pub condition: Option<Condition>,
    /// Message template; `{{ path }}` inserts values (strings bare, several
    /// joined with `, `).
    pub message: Option<String>,
    /// A CEL expression that yields the message (a string).
    pub message_expression: Option<String>,
    /// Path of the elements to check; inside, `$` is the element.
    pub for_each: Option<String>,
    /// With `forEach`: iterate the entries of each selected map instead of
    /// the selected values; the element is `{key: K, value: V}`.
    pub entries: Option<bool>,
    /// Binds the element to `$NAME` for nested `forEach` entries.
    pub as_: Option<String>,
    /// Entries checked for each element.
    pub deny: Option<Vec<DenyEntry>>,
}

impl<'de> Deserialize<'de> for DenyEntry {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EntryVisitor;
        impl<'de> Visitor<'de> for EntryVisitor {
            type Value = DenyEntry;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a deny entry (a map)")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<DenyEntry, A::Error> {
                let mut entry = DenyEntry::default();
                let mut parts = Parts::default();
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "message" => entry.message = Some(map.next_value()?),
                        "messageExpression" => entry.message_expression = Some(map.next_value()?),
                        "forEach" => entry.for_each = Some(map.next_value()?),
                        "entries" => entry.entries = Some(map.next_value()?),
                        "as" => entry.as_ = Some(map.next_value()?),
                        "deny" => entry.deny = Some(map.next_value()?),
                        _ => {
                            if !parts.read(&key, &mut map)? {
                                return Err(de::Error::unknown_field(&key, deny_entry_keys()));
                            }
                        }
                    }
                }
                if entry.for_each.is_none()
                    && (entry.as_.is_some() || entry.deny.is_some() || entry.entries.is_some())
                {
                    return Err(de::Error::custom("as, entries and deny need forEach"));
                }
                if !parts.is_empty() {
                    entry.condition = Some(parts.into_condition().map_err(de::Error::custom)?);
                }
                Ok(entry)
            }
        }
        deserializer.deserialize_map(EntryVisitor)
    }
}

impl Serialize for DenyEntry {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        if let Some(condition) = &self.condition {
            serialize_condition(condition, &mut map)?;
        }
        let optional: [(&str, Option<Value>); 6] = [
            (
                "message",
                self.message.as_ref().map(|m| Value::from(m.as_str())),
            ),
            (
                "messageExpression",
                self.message_expression
                    .as_ref()
                    .map(|m| Value::from(m.as_str())),
            ),
            (
                "forEach",
                self.for_each.as_ref().map(|p| Value::from(p.as_str())),
            ),
            ("entries", self.entries.map(Value::from)),
            (
                "as",
                self.as_.as_ref().map(|name| Value::from(name.as_str())),
            ),
            (
                "deny",
                self.deny
                    .as_ref()
                    .and_then(|entries| serde_json::to_value(entries).ok()),
            ),
        ];
        for (key, value) in optional {
            if let Some(value) = value {
                map.serialize_entry(key, &value)?;
            }
        }
        map.end()
    }
}

impl JsonSchema for DenyEntry {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "DenyEntry".into()
    }
    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let mut properties = condition_properties(generator);
        let entry = generator.subschema_for::<DenyEntry>().to_value();
        let mut put = |key: &str, schema: Value, description: &str| {
            describe(&mut properties, key, schema, description);
        };
        put(
            "message",
            json_schema!({"type": "string"}).to_value(),
            "Message template; `{{ path }}` inserts values (strings bare, several joined with `, `).",
        );
        put(
            "messageExpression",
            json_schema!({"type": "string"}).to_value(),
            "A CEL expression that yields the message (a string); used instead of `message` \
             when it evaluates, `message` otherwise.",
        );
        put(
            "forEach",
            json_schema!({"type": "string"}).to_value(),
            "Path of the elements to check; inside, `$` is the element.",
        );
        put(
            "entries",
            json_schema!({"type": "boolean"}).to_value(),
            "With `forEach`: iterate the entries of each selected map instead of the selected \
             values; the element is `{key: K, value: V}`.",
        );
        put(
            "as",
            json_schema!({"type": "string"}).to_value(),
            "Binds the element to `$NAME` for nested `forEach` entries (and `NAME` in CEL).",
        );
        put(
            "deny",
            json_schema!({"type": "array", "items": entry}).to_value(),
            "Entries checked for each element.",
        );
        json_schema!({
            "description": "A deny entry: a condition with a message, a message alone (always violated when the rule matches), or a `forEach` over a list with its own entries.",
            "type": "object",
            "properties": properties,
            "additionalProperties": false
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Condition, String> {
        serde_yaml::from_str(text).map_err(|e| super::super::load::strip_location(&e.to_string()))
    }

    #[test]
    fn reads_each_kind_of_condition() {
        assert_eq!(
            parse("{path: $.object.x, equals: 3}"),
            Ok(Condition::Test {
                path: "$.object.x".to_owned(),
                image: None,
                operator: Operator::Equals(Value::from(3)),
            })
        );
        assert_eq!(
            parse("{cel: object.x == 3}"),
            Ok(Condition::Cel("object.x == 3".to_owned()))
        );
        let not = parse("{not: {path: $.object.x, exists: true}}");
        assert!(matches!(not, Ok(Condition::Not(_))), "{not:?}");
    }

    #[test]
    fn one_operator_and_a_path_only_where_it_belongs() {
        let several = parse("{path: $.object.x, equals: 3, in: [1]}").unwrap_err();
        assert!(
            several.contains("several operators: equals, in"),
            "{several}"
        );
        let none = parse("{path: $.object.x}").unwrap_err();
        assert!(none.contains("no operator"), "{none}");
        let no_path = parse("{equals: 3}").unwrap_err();
        assert!(no_path.contains("equals needs a path"), "{no_path}");
        let composite = parse("{path: $.object.x, any: []}").unwrap_err();
        assert!(composite.contains("any takes no path"), "{composite}");
        let unknown = parse("{path: $.object.x, equal: 3}").unwrap_err();
        assert!(unknown.contains("unknown field `equal`"), "{unknown}");
    }

    #[test]
    fn deny_entries_read_back_as_they_were_written() {
        let text =
            "{path: $.object.x, image: registry, in: [a], message: no, messageExpression: \"'x'\"}";
        let entry: DenyEntry = serde_yaml::from_str(text).unwrap();
        assert_eq!(entry.message.as_deref(), Some("no"));
        assert!(matches!(entry.condition, Some(Condition::Test { .. })));
        let again: DenyEntry =
            serde_json::from_value(serde_json::to_value(&entry).unwrap()).unwrap();
        assert_eq!(again, entry);
        let bare: DenyEntry = serde_yaml::from_str("{message: always}").unwrap();
        assert_eq!(bare.condition, None);
        let loop_parts = serde_yaml::from_str::<DenyEntry>("{as: c, message: m}").unwrap_err();
        assert!(
            loop_parts.to_string().contains("need forEach"),
            "{loop_parts}"
        );
    }

    #[test]
    fn every_operator_is_in_the_schema() {
        let schema = serde_json::to_value(schemars::schema_for!(DenyEntry)).unwrap();
        let properties = &schema["properties"];
        for key in Operator::KEYS
            .iter()
            .chain(&STRUCTURE_KEYS)
            .chain(&DENY_KEYS)
        {
            assert!(
                properties.get(*key).is_some(),
                "{key} missing from the schema"
            );
        }
    }
}
