//! The documents a rule's paths read: `object`, `oldObject`, `request`,
//! `podSpec`, `oldPodSpec`, and the elements of enclosing `forEach` entries.

use std::cell::{Cell, OnceCell};

use crate::image::{ImageRef, MAX_REFERENCE_LEN};
use crate::rules::ImagePart;

use serde_json::{Map, Value, json};

use super::budget::Budget;
use crate::patch::{Token, resolve};
use crate::plan::{JsonPath, RequestFields, Root, pod_spec_location};
use crate::review::Request;

/// One review's documents.
pub struct Document<'a> {
    /// The (possibly mutated) object; null when absent.
    pub object: &'a Value,
    /// The old object; null when absent.
    pub old_object: &'a Value,
    request: &'a RequestValue<'a>,
    pod_spec: Option<&'static [Token]>,
    /// The object's pod spec, found once: rules over containers ask for it
    /// at nearly every path, and each lookup walked the object's maps again.
    object_pod_spec: Option<&'a Value>,
    budget: &'a Budget,
    /// Image references parsed so far (see [`Document::with_image`]),
    /// allocated at the first: most documents never test an image.
    images: OnceCell<Box<ImageCache>>,
}

/// How many distinct image references a document keeps parsed: the
/// bundled rules test each container's image four times. Past these, a
/// reference is parsed again at each test, so the cache's size and the
/// cost of a lookup stay fixed however many containers a Pod has.
const CACHED_IMAGES: usize = 8;

/// Parsed image references, each under a copy of its text. The text is the
/// key, not its address: a `forEach` over map entries builds each entry
/// afresh, and a later entry's text may sit where an earlier one's was.
#[derive(Default)]
struct ImageCache {
    filled: Cell<usize>,
    slots: [OnceCell<(Box<str>, Option<ImageParts>)>; CACHED_IMAGES],
}

/// The parts of an image reference a runtime would pull, by
/// [`ImagePart`] in declaration order, as [`ImageRef::part`] gives them.
pub struct ImageParts([Option<Box<str>>; 4]);

impl ImageParts {
    fn of(image: &ImageRef<'_>) -> Self {
        use ImagePart::{Digest, Registry, Repository, Tag};
        ImageParts([Registry, Repository, Tag, Digest].map(|part| image.part(part).map(Box::from)))
    }

    /// One part: the tag and the digest only when written.
    pub fn part(&self, part: ImagePart) -> Option<&str> {
        self.0.get(part as usize).and_then(Option::as_deref)
    }
}

/// The `request` document, built only when a path reads it, with only the
/// members the plan's paths can reach.
pub struct RequestValue<'a> {
    request: &'a Request,
    fields: RequestFields,
    value: OnceCell<Option<Value>>,
}

impl<'a> RequestValue<'a> {
    /// Wraps a request whose `fields` the rules read.
    pub fn new(request: &'a Request, fields: RequestFields) -> Self {
        RequestValue {
            request,
            fields,
            value: OnceCell::new(),
        }
    }

    /// The document, held on `budget` while the review is evaluated;
    /// `None`, the budget spent, when it would take more memory than the
    /// budget leaves for CEL values (a user's millions of groups: the
    /// request itself is bounded as parsed, and is built again here).
    fn get(&self, budget: &Budget) -> Option<&Value> {
        self.value
            .get_or_init(|| {
                let value = self.build();
                let memory = json_memory(&value, budget.memory_left());
                if memory > budget.memory_left() {
                    budget.out_of_memory();
                    return None;
                }
                budget.hold(memory);
                Some(value)
            })
            .as_ref()
    }

    fn build(&self) -> Value {
        let r = self.request;
        let mut map = Map::new();
        // Absent fields are absent, not null, so `exists` means what it says.
        let mut put = |name: &str, value: Value| {
            if !value.is_null() {
                map.insert(name.to_owned(), value);
            }
        };
        for name in RequestFields::NAMES {
            if !self.fields.contains(name) {
                continue;
            }
            let value = match name {
                "uid" => json!(r.uid),
                "kind" => json!(r.kind),
                "resource" => json!(r.resource),
                "subResource" => json!(r.sub_resource),
                "requestKind" => json!(r.request_kind),
                "requestResource" => json!(r.request_resource),
                "requestSubResource" => json!(r.request_sub_resource),
                "name" => json!(r.name),
                "namespace" => json!(r.namespace),
                "operation" => json!(r.operation),
                "userInfo" => json!(r.user_info),
                "dryRun" => json!(r.dry_run.unwrap_or(false)),
                "options" => r
                    .options
                    .as_ref()
                    .and_then(|raw| serde_json::from_str(raw.get()).ok())
                    .unwrap_or(Value::Null),
                _ => Value::Null,
            };
            put(name, value);
        }
        Value::Object(map)
    }
}

/// About the bytes `value` takes in memory (a `Value` per value, each
/// string's and key's text, a map entry's key and overhead), counted only
/// up to just past `limit`.
fn json_memory(value: &Value, limit: u64) -> u64 {
    const VALUE: u64 = std::mem::size_of::<Value>() as u64;
    /// A map entry's key and its share of the tree's nodes.
    const ENTRY: u64 = 48;
    let text = |len: usize| u64::try_from(len).unwrap_or(u64::MAX).saturating_add(15) & !15;
    let mut memory = 0_u64;
    let mut pending = vec![value];
    while let Some(value) = pending.pop() {
        let bytes = match value {
            Value::String(s) => text(s.len()),
            Value::Array(items) => {
                pending.extend(items);
                0
            }
            Value::Object(map) => {
                pending.extend(map.values());
                map.keys()
                    .map(|key| ENTRY.saturating_add(text(key.len())))
                    .fold(0, u64::saturating_add)
            }
            _ => 0,
        };
        memory = memory.saturating_add(VALUE).saturating_add(bytes);
        if memory > limit {
            break;
        }
    }
    memory
}

impl<'a> Document<'a> {
    /// The documents of `request`, with `object` and `old_object` parsed,
    /// charging the work of reading them to `budget`.
    pub fn new(
        request: &'a RequestValue<'a>,
        object: &'a Value,
        old_object: &'a Value,
        budget: &'a Budget,
    ) -> Self {
        let pod_spec = pod_spec_location(&request.request.kind.kind);
        Document {
            object,
            old_object,
            request,
            pod_spec,
            object_pod_spec: pod_spec.and_then(|tokens| resolve(object, tokens)),
            budget,
            images: OnceCell::new(),
        }
    }

    /// The budget the review's work is charged to.
    pub fn budget(&self) -> &'a Budget {
        self.budget
    }

    /// The same documents with another object (the mutated copy).
    pub fn with_object<'b>(&'b self, object: &'b Value) -> Document<'b>
    where
        'a: 'b,
    {
        Document {
            object,
            old_object: self.old_object,
            request: self.request,
            pod_spec: self.pod_spec,
            object_pod_spec: self.pod_spec.and_then(|tokens| resolve(object, tokens)),
            budget: self.budget,
            images: OnceCell::new(),
        }
    }

    /// Calls `f` with the parts of the image reference `text` holds
    /// (`None` when no runtime would pull it), parsed once per document for
    /// the first [`CACHED_IMAGES`] distinct texts and at each call past them
    /// (or when longer than any reference may be).
    pub fn with_image<R>(&self, text: &str, f: impl FnOnce(Option<&ImageParts>) -> R) -> R {
        let cache = self.images.get_or_init(Box::default);
        let filled = cache.filled.get();
        for slot in cache.slots.iter().take(filled) {
            if let Some((key, parts)) = slot.get()
                && **key == *text
            {
                return f(parts.as_ref());
            }
        }
        let parts = ImageRef::parse(text)
            .ok()
            .map(|image| ImageParts::of(&image));
        // A text too long to be a reference is refused at once, and not
        // copied into the cache.
        if text.len() > MAX_REFERENCE_LEN {
            return f(parts.as_ref());
        }
        match cache.slots.get(filled) {
            Some(slot) => {
                cache.filled.set(filled + 1);
                let (_, parts) = slot.get_or_init(|| (text.into(), parts));
                f(parts.as_ref())
            }
            None => f(parts.as_ref()),
        }
    }

    /// Where the pod spec sits in the object, for this kind.
    pub fn pod_spec_location(&self) -> Option<&'static [Token]> {
        self.pod_spec
    }

    fn pod_spec_in(&self, object: &'a Value) -> Option<&'a Value> {
        resolve(object, self.pod_spec?)
    }

    /// The value a document-level root names.
    pub fn root(&self, root: Root) -> Option<&'a Value> {
        match root {
            Root::Object => Some(self.object),
            Root::OldObject => Some(self.old_object),
            Root::Request => self.request.get(self.budget),
            Root::PodSpec => self.object_pod_spec,
            Root::OldPodSpec => self.pod_spec_in(self.old_object),
            Root::Element | Root::Binding(_) => None,
        }
    }
}

/// Where paths are evaluated: the documents, plus the elements of enclosing
/// `forEach` entries (outermost first; the last is `$`).
#[derive(Clone, Copy)]
pub struct Frame<'s, 'a> {
    /// The documents.
    pub document: &'s Document<'a>,
    /// Elements of enclosing `forEach` entries.
    pub elements: &'s [&'a Value],
}

impl<'s, 'a> Frame<'s, 'a> {
    /// The document level.
    pub fn top(document: &'s Document<'a>) -> Self {
        Frame {
            document,
            elements: &[],
        }
    }

    /// The value `root` names here.
    pub fn root(&self, root: Root) -> Option<&'a Value> {
        match root {
            Root::Element => self.elements.last().copied(),
            Root::Binding(depth) => self.elements.get(depth).copied(),
            other => self.document.root(other),
        }
    }

    /// The value `path` starts from here, when the budget affords
    /// evaluating the path on it ([`Budget::afford_query`]).
    fn affordable_root(&self, path: &JsonPath) -> Option<&'a Value> {
        self.root(path.root())
            .filter(|root| self.document.budget.afford_query(path, root))
    }

    /// Every value `path` selects here, each charged to the budget.
    pub fn select(&self, path: &JsonPath) -> Vec<&'a Value> {
        let mut out = Vec::new();
        if let Some(root) = self.affordable_root(path) {
            path.select(root, &mut out);
        }
        self.document
            .budget
            .charge(1 + u64::try_from(out.len()).unwrap_or(u64::MAX));
        out
    }

    /// The value a singular path ([`JsonPath::is_singular`]) selects here,
    /// charged to the budget as [`Frame::select`] charges it.
    pub fn select_one(&self, path: &JsonPath) -> Option<&'a Value> {
        let found = self.affordable_root(path).and_then(|root| path.first(root));
        self.document.budget.charge(1 + u64::from(found.is_some()));
        found
    }

    /// The first value `path` selects here.
    pub fn first(&self, path: &JsonPath) -> Option<&'a Value> {
        self.document.budget.charge(1);
        self.affordable_root(path).and_then(|root| path.first(root))
    }
}
