//! What a pass of the mutating rules read, so that the pass can tell whether
//! another one could change anything.
//!
//! The mutations run to a fixpoint: passes repeat until one changes nothing.
//! That last, confirming pass re-evaluates every rule, and it is needed only
//! when a write of the pass came after a read it could have changed. Every
//! edit but `set` only adds what is missing (a JSON null counts as missing),
//! so once an edit has run, its targets stay settled; what can still change
//! its outcome is what it read on the way: the object selector and `when`
//! conditions, the elements a `forEach` or a write's prefix went through, and
//! the value a `setIfAbsent` copies. So a pass records those reads, with the
//! number of writes made before each, and a further pass is needed only when
//! a later write of the same pass reaches one of them.
//!
//! A copied value only matters while its target is missing: a read of it is
//! ignored when every target of its edit is present at the end of the pass.
//! A pass that runs a `set` edit (which replaces values) or a path that
//! cannot be tracked is always confirmed by another pass.

use serde_json::Value;

use crate::patch::{Editor, Token, resolve};
use crate::plan::{JsonPath, Predicate, ReadKind, Root};

/// Where a read path starts, in the object.
#[derive(Debug, Clone, Copy)]
pub enum Base {
    /// The object itself.
    Object,
    /// The pod spec of the object's kind.
    PodSpec,
    /// A `forEach` element, by its number in [`Reads::elements`].
    Element(usize),
}

/// What was read below a base.
#[derive(Debug, Clone, Copy)]
enum Target<'p> {
    /// A path.
    Path(&'p JsonPath, ReadKind),
    /// `metadata.labels[key]`, read by an object selector.
    Label(&'p str),
}

#[derive(Debug)]
struct Read<'p> {
    /// Writes made before the read; later ones may have changed it.
    after: usize,
    base: Base,
    target: Target<'p>,
    /// Index into [`Reads::guards`]: the read does not matter when all those
    /// locations are present at the end of the pass.
    unless_present: Option<usize>,
}

/// The reads of one pass.
#[derive(Debug)]
pub struct Reads<'p> {
    pod_spec: Option<&'static [Token]>,
    elements: Vec<Vec<Token>>,
    guards: Vec<Vec<Vec<Token>>>,
    reads: Vec<Read<'p>>,
    untracked: bool,
}

impl<'p> Reads<'p> {
    /// No reads yet, for an object whose pod spec (if its kind has one) is at
    /// `pod_spec`.
    pub fn new(pod_spec: Option<&'static [Token]>) -> Self {
        Reads {
            pod_spec,
            elements: Vec::new(),
            guards: Vec::new(),
            reads: Vec::new(),
            untracked: false,
        }
    }

    /// Records that the pass did something these records cannot vouch for.
    pub fn untracked(&mut self) {
        self.untracked = true;
    }

    /// Registers a `forEach` element at `location`.
    pub fn element(&mut self, location: &[Token]) -> Base {
        self.elements.push(location.to_vec());
        Base::Element(self.elements.len() - 1)
    }

    /// Records a read of `path`, evaluated with `element` as `$`, after
    /// `after` writes. Returns the read's number for [`Reads::guard`].
    pub fn path(
        &mut self,
        path: &'p JsonPath,
        kind: ReadKind,
        element: Option<Base>,
        after: usize,
    ) -> Option<usize> {
        let base = match path.root() {
            Root::Object => Base::Object,
            Root::PodSpec => Base::PodSpec,
            Root::Element => element?,
            // Mutations bind no names; should one appear, do not guess.
            Root::Binding(_) => {
                self.untracked = true;
                return None;
            }
            // Never written.
            Root::OldObject | Root::OldPodSpec | Root::Request => return None,
        };
        self.reads.push(Read {
            after,
            base,
            target: Target::Path(path, kind),
            unless_present: None,
        });
        Some(self.reads.len() - 1)
    }

    /// Records every path of `predicates` as a value read.
    pub fn predicates(&mut self, predicates: &'p [Predicate], element: Option<Base>, after: usize) {
        for predicate in predicates {
            predicate.for_each_path(&mut |path| {
                self.path(path, ReadKind::Value, element, after);
            });
        }
    }

    /// Records the object selector's look at label `key`.
    pub fn label(&mut self, key: &'p str, after: usize) {
        self.reads.push(Read {
            after,
            base: Base::Object,
            target: Target::Label(key),
            unless_present: None,
        });
    }

    /// Makes read `read` irrelevant once all of `locations` are present.
    pub fn guard(&mut self, read: Option<usize>, locations: Vec<Vec<Token>>) {
        let Some(read) = read.and_then(|i| self.reads.get_mut(i)) else {
            return;
        };
        self.guards.push(locations);
        read.unless_present = Some(self.guards.len() - 1);
    }

    /// True when a write recorded in `editor` after a read could have changed
    /// it, so another pass over `object` might change something.
    pub fn need_another_pass(&self, editor: &Editor, object: &Value) -> bool {
        if self.untracked {
            return true;
        }
        let Some(first) = self.reads.iter().map(|read| read.after).min() else {
            return false;
        };
        let writes = editor.locations_from(first);
        self.reads.iter().any(|read| {
            let later = writes.get(read.after - first..).unwrap_or_default();
            later.iter().any(|write| self.affects(write, read)) && !self.settled(read, object)
        })
    }

    fn settled(&self, read: &Read<'_>, object: &Value) -> bool {
        let Some(locations) = read.unless_present.and_then(|i| self.guards.get(i)) else {
            return false;
        };
        locations
            .iter()
            .all(|location| resolve(object, location).is_some_and(|value| !value.is_null()))
    }

    /// Whether adding at `write` can change what `read` saw.
    fn affects(&self, write: &[Token], read: &Read<'_>) -> bool {
        // `zip` compares the common length: a write above the base agrees
        // with it as much as one below.
        let base: &[Token] = match read.base {
            Base::Object => &[],
            Base::PodSpec => match self.pod_spec {
                Some(location) => location,
                None => return false, // this kind has no pod spec: nothing was read
            },
            Base::Element(i) => match self.elements.get(i) {
                Some(location) => location,
                None => return true,
            },
        };
        if !base.iter().zip(write).all(|(step, token)| step == token) {
            return false;
        }
        let base_len = base.len();
        let Some(rest) = write.get(base_len..) else {
            // The write is above the base: it created or replaced it.
            return true;
        };
        match read.target {
            Target::Path(path, kind) => path.is_affected_by(rest, kind),
            Target::Label(key) => ["metadata", "labels", key]
                .iter()
                .zip(rest)
                .all(|(step, token)| matches!(token, Token::Key(token) if **token == **step)),
        }
    }
}
