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

use std::collections::HashMap;

use foldhash::fast::RandomState;

use serde_json::Value;

use super::budget::Budget;
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
enum Reading<'p> {
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
    reading: Reading<'p>,
    /// Index into [`Reads::guards`]: the read does not matter when all those
    /// locations are present at the end of the pass.
    unless_present: Option<usize>,
}

/// Reads a pass makes room for at its start, rather than growing step by
/// step: the bundled rules record 15 for a Pod.
const FIRST_READS: usize = 16;
/// `forEach` elements a pass makes room for: a Pod's first few containers.
const FIRST_ELEMENTS: usize = 4;
/// Guarded reads a pass makes room for: the bundled rules record 3 for a Pod.
const FIRST_GUARDS: usize = 4;

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
            elements: Vec::with_capacity(FIRST_ELEMENTS),
            guards: Vec::with_capacity(FIRST_GUARDS),
            reads: Vec::with_capacity(FIRST_READS),
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
            reading: Reading::Path(path, kind),
            unless_present: None,
        });
        Some(self.reads.len() - 1)
    }

    /// Records every path of `predicates` as a value read.
    pub fn predicates(
        &mut self,
        predicates: impl IntoIterator<Item = &'p Predicate>,
        element: Option<Base>,
        after: usize,
    ) {
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
            reading: Reading::Label(key),
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
    ///
    /// Linear in the reads and writes of the pass: the reads that still
    /// matter are filed by the location of their base in a tree, and each
    /// write walks that tree along its own location, looking only at the
    /// reads whose base lies on its way (see [`ReadTree`]).
    ///
    /// The work is charged to `budget`: one step per write and per read it
    /// is compared with.
    pub fn need_another_pass(&self, editor: &Editor, object: &Value, budget: &Budget) -> bool {
        if self.untracked {
            return true;
        }
        let Some(first) = self.reads.iter().map(|read| read.after).min() else {
            return false;
        };
        let writes = editor.operations_from(first);
        if writes.is_empty() {
            return false;
        }
        let tree = ReadTree::new(self, object);
        budget.charge(u64::try_from(self.reads.len()).unwrap_or(u64::MAX));
        writes.iter().enumerate().any(|(offset, write)| {
            let (affected, compared) = tree.affected_by(&write.location, first + offset);
            budget.charge(1 + compared);
            affected
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

    /// Where the base of `read` is in the object; `None` when it is not in
    /// this object at all (a pod spec read on a kind without one).
    fn base_location(&self, read: &Read<'_>) -> Option<BaseLocation<'_>> {
        match read.base {
            Base::Object => Some(BaseLocation::At(&[])),
            Base::PodSpec => self.pod_spec.map(BaseLocation::At),
            Base::Element(i) => Some(
                self.elements
                    .get(i)
                    .map_or(BaseLocation::Unknown, |location| BaseLocation::At(location)),
            ),
        }
    }
}

enum BaseLocation<'r> {
    At(&'r [Token]),
    /// Never registered: any write may have changed it.
    Unknown,
}

/// Identifies a reading for merging duplicates: the same path (the same
/// compiled path of the plan) read the same way, or the same label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum ReadingKey<'p> {
    Path(*const JsonPath, ReadKind),
    Label(&'p str),
    Anything,
}

/// A reading still in question, with the earliest write count of the
/// reads merged into it.
#[derive(Debug, Clone, Copy)]
struct Pending<'p> {
    reading: Option<Reading<'p>>,
    after: usize,
}

#[derive(Debug, Default)]
struct Node<'p> {
    children: HashMap<Token, usize, RandomState>,
    reads: Vec<Pending<'p>>,
    /// The smallest `after` of any read here or below.
    subtree_after: usize,
}

/// The reads of a pass that still matter (not settled by their guards),
/// filed by the location of their base: a write at `w` can only change a
/// read whose base is on the way to `w` (the write is below the base) or
/// below `w` (the write created or replaced the base). Reads of the same
/// reading at the same base are merged, keeping the earliest: a `forEach` over
/// thousands of elements that reads one object-level path for each files it
/// once.
struct ReadTree<'p> {
    nodes: Vec<Node<'p>>,
}

impl<'p> ReadTree<'p> {
    fn new(reads: &Reads<'p>, object: &Value) -> Self {
        let mut tree = ReadTree {
            nodes: vec![Node {
                subtree_after: usize::MAX,
                ..Node::default()
            }],
        };
        let mut merged: HashMap<(usize, ReadingKey<'p>), usize, RandomState> =
            HashMap::with_capacity_and_hasher(reads.reads.len(), RandomState::default());
        for read in &reads.reads {
            if reads.settled(read, object) {
                continue;
            }
            let (node, reading) = match reads.base_location(read) {
                None => continue, // nothing was read
                Some(BaseLocation::Unknown) => (0, None),
                Some(BaseLocation::At(location)) => (tree.node_at(location), Some(read.reading)),
            };
            let key = match reading {
                Some(Reading::Path(path, kind)) => ReadingKey::Path(std::ptr::from_ref(path), kind),
                Some(Reading::Label(key)) => ReadingKey::Label(key),
                None => ReadingKey::Anything,
            };
            let Some(slot) = tree.nodes.get_mut(node) else {
                continue;
            };
            match merged.entry((node, key)) {
                std::collections::hash_map::Entry::Occupied(entry) => {
                    if let Some(pending) = slot.reads.get_mut(*entry.get()) {
                        pending.after = pending.after.min(read.after);
                    }
                }
                std::collections::hash_map::Entry::Vacant(entry) => {
                    entry.insert(slot.reads.len());
                    slot.reads.push(Pending {
                        reading,
                        after: read.after,
                    });
                }
            }
        }
        tree.sum_up();
        tree
    }

    /// The node for `location`, created with its parents when missing.
    fn node_at(&mut self, location: &[Token]) -> usize {
        let mut current = 0;
        for token in location {
            let next = self.nodes.len();
            let child = *self.nodes[current]
                .children
                .entry(token.clone())
                .or_insert(next);
            if child == next {
                self.nodes.push(Node {
                    subtree_after: usize::MAX,
                    ..Node::default()
                });
            }
            current = child;
        }
        current
    }

    /// Fills in `subtree_after`. Children are always created after their
    /// parent, so one backward sweep sees every child before its parent.
    fn sum_up(&mut self) {
        for i in (0..self.nodes.len()).rev() {
            let own = self.nodes[i]
                .reads
                .iter()
                .map(|read| read.after)
                .min()
                .unwrap_or(usize::MAX);
            let below = self.nodes[i]
                .children
                .values()
                .map(|&child| self.nodes[child].subtree_after)
                .min()
                .unwrap_or(usize::MAX);
            self.nodes[i].subtree_after = own.min(below);
        }
    }

    /// Whether write number `number`, at `write`, can change a read made
    /// before it, and how many reads it was compared with.
    fn affected_by(&self, write: &[Token], number: usize) -> (bool, u64) {
        let mut compared = 0u64;
        let mut current = 0;
        for (depth, token) in write.iter().enumerate() {
            let Some(node) = self.nodes.get(current) else {
                return (true, compared);
            };
            if node.subtree_after > number {
                return (false, compared); // every read at or below came after the write
            }
            let rest = &write[depth..];
            let here = node.reads.iter().any(|read| {
                compared += 1;
                read.after <= number && match read.reading {
                    None => true,
                    Some(Reading::Path(path, kind)) => path.is_affected_by(rest, kind),
                    Some(Reading::Label(key)) => ["metadata", "labels", key].iter().zip(rest).all(
                        |(step, token)| matches!(token, Token::Key(token) if **token == **step),
                    ),
                }
            });
            if here {
                return (true, compared);
            }
            match node.children.get(token) {
                Some(&child) => current = child,
                None => return (false, compared),
            }
        }
        // The write is at or above every base from here down: it created or
        // replaced what they read.
        let affected = self
            .nodes
            .get(current)
            .is_none_or(|node| node.subtree_after <= number);
        (affected, compared)
    }
}
