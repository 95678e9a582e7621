//! Per-decode arenas that let beams carry small ids instead of strings: interned words, a trie
//! of unfinished words, a trie of word sequences (with their cached LM scores) and shared
//! linked lists of word frame spans.

use std::hash::BuildHasher;

use rustc_hash::FxHashMap;

use super::fusion::LmFusion;
use crate::hotword::HotwordScorer;
use crate::lm::LmState;

pub(crate) const ROOT: u32 = 0;

/// Word strings to ids: LM words keep their LM id, other words get ids after the LM vocabulary.
pub(crate) struct Words {
    lm_vocab: u32,
    extra: Vec<Box<str>>,
    extra_index: FxHashMap<Box<str>, u32>,
}

impl Words {
    pub(crate) fn new(lm_vocab: u32) -> Self {
        Self {
            lm_vocab,
            extra: Vec::new(),
            extra_index: FxHashMap::default(),
        }
    }

    pub(crate) fn intern(&mut self, word: &str, fusion: Option<&LmFusion>) -> u32 {
        if let Some(id) = fusion.and_then(|f| f.lm.word_id(word)) {
            return id;
        }
        if let Some(&id) = self.extra_index.get(word) {
            return id;
        }
        let id = self.lm_vocab + self.extra.len() as u32;
        self.extra.push(word.into());
        self.extra_index.insert(word.into(), id);
        id
    }

    pub(crate) fn lm_id(&self, id: u32) -> Option<u32> {
        (id < self.lm_vocab).then_some(id)
    }

    pub(crate) fn text<'a>(&'a self, id: u32, fusion: Option<&'a LmFusion>) -> &'a str {
        match fusion {
            Some(f) if id < self.lm_vocab => f.lm.word(id),
            _ => &self.extra[(id - self.lm_vocab) as usize],
        }
    }
}

/// An unfinished word (pyctcdecode's `word_part`), deduplicated by its text.
pub(crate) struct PartialNode {
    /// Byte range of the text in [`Partials::arena`].
    start: u32,
    end: u32,
    /// Length in characters (pyctcdecode measures partial words with `len`).
    pub(crate) chars: u32,
    /// Range of the sorted unigram list whose words start with this text.
    range: (u32, u32),
    /// Interned word id, once the partial word has been completed somewhere.
    pub(crate) word: Option<u32>,
    /// Cached partial-word score term (LM or hotword), once computed.
    pub(crate) score: Option<f64>,
}

impl PartialNode {
    /// No unigram starts with this text.
    pub(crate) fn is_oov(&self) -> bool {
        self.range.0 == self.range.1
    }
}

/// Store of unfinished words; `ROOT` is the empty word. Texts live in one shared string so
/// new partial words cost no allocation of their own.
pub(crate) struct Partials {
    pub(crate) nodes: Vec<PartialNode>,
    arena: String,
    scratch: String,
    /// (parent, token, word-start flag) -> node.
    edges: FxHashMap<(u32, u32, bool), u32>,
    /// Nodes by text, so equal strings reached by different token paths are one node.
    by_text: hashbrown::HashTable<u32>,
    hasher: rustc_hash::FxBuildHasher,
}

impl Partials {
    /// `unigrams`: size of the sorted unigram list; `expected`: a guess of how many partial
    /// words the decode will create (sizing the tables up front avoids rehashing as they grow).
    pub(crate) fn new(unigrams: usize, expected: usize) -> Self {
        let hasher = rustc_hash::FxBuildHasher;
        let mut by_text = hashbrown::HashTable::with_capacity(expected);
        by_text.insert_unique(hasher.hash_one(""), ROOT, |_| 0);
        Self {
            nodes: vec![PartialNode {
                start: 0,
                end: 0,
                chars: 0,
                range: (0, unigrams as u32),
                word: None,
                score: None,
            }],
            arena: String::with_capacity(expected * 6),
            scratch: String::new(),
            edges: FxHashMap::with_capacity_and_hasher(expected, Default::default()),
            by_text,
            hasher,
        }
    }

    /// Text of node `n`.
    pub(crate) fn text(&self, n: u32) -> &str {
        let node = &self.nodes[n as usize];
        &self.arena[node.start as usize..node.end as usize]
    }

    /// The node for `parent`'s text + `piece` (or just `piece` when `start`); `unigrams` is
    /// the sorted unigram list used to narrow the prefix range.
    pub(crate) fn step(
        &mut self,
        parent: u32,
        token: u32,
        start: bool,
        piece: &str,
        unigrams: &[Box<str>],
    ) -> u32 {
        if let Some(&n) = self.edges.get(&(parent, token, start)) {
            return n;
        }
        let base = if start { ROOT } else { parent };
        self.scratch.clear();
        let b = &self.nodes[base as usize];
        self.scratch
            .push_str(&self.arena[b.start as usize..b.end as usize]);
        self.scratch.push_str(piece);
        let hash = self.hasher.hash_one(self.scratch.as_str());
        let (arena, nodes, scratch) = (&self.arena, &self.nodes, &self.scratch);
        let found = self.by_text.find(hash, |&id| {
            let nd = &nodes[id as usize];
            &arena[nd.start as usize..nd.end as usize] == scratch.as_str()
        });
        let n = match found {
            Some(&n) => n,
            None => {
                let b = &self.nodes[base as usize];
                let depth = (b.end - b.start) as usize;
                let range = narrow(unigrams, b.range, depth, piece.as_bytes());
                let chars = b.chars + piece.chars().count() as u32;
                let start_off = self.arena.len() as u32;
                self.arena.push_str(&self.scratch);
                let n = self.nodes.len() as u32;
                self.nodes.push(PartialNode {
                    start: start_off,
                    end: self.arena.len() as u32,
                    chars,
                    range,
                    word: None,
                    score: None,
                });
                let (arena, nodes, hasher) = (&self.arena, &self.nodes, &self.hasher);
                self.by_text.insert_unique(hash, n, |&id| {
                    let nd = &nodes[id as usize];
                    hasher.hash_one(&arena[nd.start as usize..nd.end as usize])
                });
                n
            }
        };
        self.edges.insert((parent, token, start), n);
        n
    }
}

/// How `w[depth..]` compares with `piece` on `piece`'s length: `Less`, `Equal` (starts with
/// it) or `Greater`. A hand loop: pieces are a few bytes, where a `memcmp` call costs more than
/// the comparison (this runs twice per new partial word, over the 70k-word unigram list).
#[inline]
fn cmp_at(w: &str, depth: usize, piece: &[u8]) -> std::cmp::Ordering {
    let rest = w.as_bytes().get(depth..).unwrap_or(&[]);
    for (i, &p) in piece.iter().enumerate() {
        match rest.get(i) {
            None => return std::cmp::Ordering::Less,
            Some(&r) if r != p => return r.cmp(&p),
            _ => {}
        }
    }
    std::cmp::Ordering::Equal
}

/// Sub-range of `words[range]` (all sharing a prefix of `depth` bytes) whose next bytes
/// start with `piece`.
fn narrow(words: &[Box<str>], range: (u32, u32), depth: usize, piece: &[u8]) -> (u32, u32) {
    let (lo, hi) = (range.0 as usize, range.1 as usize);
    if lo >= hi || piece.is_empty() {
        return range;
    }
    let slice = &words[lo..hi];
    let a = slice.partition_point(|w| cmp_at(w, depth, piece).is_lt());
    let b = a + slice[a..].partition_point(|w| cmp_at(w, depth, piece).is_eq());
    ((lo + a) as u32, (lo + b) as u32)
}

/// A word sequence (pyctcdecode's beam `text`) with its cached fused LM score.
pub(crate) struct TextNode {
    pub(crate) parent: u32,
    pub(crate) word: u32,
    pub(crate) state: LmState,
    /// Sum of fused word scores (pyctcdecode's `raw_lm_score`).
    pub(crate) raw: f64,
    /// Sum of hotword bonuses of the words.
    pub(crate) hot: f64,
    /// Id of the last `history_len` words (equal ids for equal word tuples), for history pruning.
    pub(crate) history: u32,
}

/// Trie of word sequences; `ROOT` is the empty text.
pub(crate) struct Texts {
    pub(crate) nodes: Vec<TextNode>,
    children: FxHashMap<(u32, u32), u32>,
    history_len: usize,
    histories: FxHashMap<[u32; 8], u32>,
}

impl Texts {
    /// `history_len`: words that identify a history (pyctcdecode: `max(1, order - 1)`).
    pub(crate) fn new(start: LmState, history_len: usize) -> Self {
        let mut histories = FxHashMap::default();
        histories.insert([u32::MAX; 8], 0);
        Self {
            nodes: vec![TextNode {
                parent: ROOT,
                word: u32::MAX,
                state: start,
                raw: 0.0,
                hot: 0.0,
                history: 0,
            }],
            children: FxHashMap::default(),
            history_len: history_len.min(8),
            histories,
        }
    }

    /// The text `parent` + `word`, scoring the word on first sight.
    pub(crate) fn child(
        &mut self,
        parent: u32,
        word: u32,
        words: &Words,
        fusion: Option<&LmFusion>,
        hot: &HotwordScorer,
    ) -> u32 {
        if let Some(&n) = self.children.get(&(parent, word)) {
            return n;
        }
        let p = &self.nodes[parent as usize];
        let mut state = LmState::null();
        let raw = match fusion {
            Some(f) => p.raw + f.word_score(&p.state, words.lm_id(word), false, &mut state),
            None => 0.0,
        };
        let bonus = if hot.is_empty() {
            0.0
        } else {
            hot.word_bonus(words.text(word, fusion))
        };
        let hot = p.hot + bonus;
        let mut key = [u32::MAX; 8];
        key[0] = word;
        let mut up = parent;
        for slot in key.iter_mut().take(self.history_len).skip(1) {
            if up == ROOT {
                break;
            }
            *slot = self.nodes[up as usize].word;
            up = self.nodes[up as usize].parent;
        }
        let next_id = self.histories.len() as u32;
        let history = *self.histories.entry(key).or_insert(next_id);
        let node = TextNode {
            parent,
            word,
            state,
            raw,
            hot,
            history,
        };
        let n = self.nodes.len() as u32;
        self.nodes.push(node);
        self.children.insert((parent, word), n);
        n
    }

    /// Word ids from first to last.
    pub(crate) fn words_of(&self, mut node: u32) -> Vec<u32> {
        let mut out = Vec::new();
        while node != ROOT {
            out.push(self.nodes[node as usize].word);
            node = self.nodes[node as usize].parent;
        }
        out.reverse();
        out
    }
}

/// Persistent lists of (start, end) frame spans, one per finished word; id 0 is the empty list.
pub(crate) struct Spans {
    nodes: Vec<(u32, i32, i32)>,
}

impl Spans {
    pub(crate) fn new() -> Self {
        Self {
            nodes: vec![(0, -1, -1)],
        }
    }

    pub(crate) fn push(&mut self, list: u32, span: (i32, i32)) -> u32 {
        self.nodes.push((list, span.0, span.1));
        (self.nodes.len() - 1) as u32
    }

    /// Spans from first to last.
    pub(crate) fn collect(&self, mut list: u32) -> Vec<(i32, i32)> {
        let mut out = Vec::new();
        while list != 0 {
            let (p, s, e) = self.nodes[list as usize];
            out.push((s, e));
            list = p;
        }
        out.reverse();
        out
    }
}
