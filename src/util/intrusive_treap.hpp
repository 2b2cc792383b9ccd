// IntrusiveTreap: a balanced binary search tree whose links live inside the
// nodes, so inserting and erasing never allocate.
//
// A treap keeps BST order on keys and heap order on per-node priorities;
// with priorities from a good hash the expected depth is O(log n). Nodes are
// described by a Traits class:
//   static Node*& left(Node*);  static Node*& right(Node*);
//   static std::uint32_t priority(const Node*);
//   static bool less(const Node* a, const Node* b);   // strict key order
//   static void update(Node*);                          // recompute augmentation from children
// `update` lets a tree carry subtree summaries (the pool's address tree keeps
// the largest block size below each node). Invariant: every node's
// augmentation is up to date whenever control leaves a public member.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace tidepool::util {

template <typename Node, typename Traits>
class IntrusiveTreap {
 public:
  [[nodiscard]] Node* root() const noexcept { return root_; }
  [[nodiscard]] bool empty() const noexcept { return root_ == nullptr; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

  // `node` must not be in any tree; its links are overwritten.
  void insert(Node* node) noexcept {
    Traits::left(node) = nullptr;
    Traits::right(node) = nullptr;
    Traits::update(node);
    root_ = insert_at(root_, node);
    ++size_;
  }

  // `node` must be in this tree.
  void erase(Node* node) noexcept {
    root_ = erase_at(root_, node);
    --size_;
  }

  // `node`, in this tree, changed its key without passing another node's
  // and its augmented value may have changed: its place stands, and the
  // summaries on the path to it are recomputed. One walk down, where an
  // erase and an insert would split and merge the tree twice.
  void refresh(Node* node) noexcept { refresh_at(root_, node); }

  // The leftmost node not less than `probe` (by Traits::less), or null.
  template <typename Less>
  [[nodiscard]] Node* lower_bound(Less&& key_less_than_probe) const noexcept {
    Node* best = nullptr;
    for (Node* t = root_; t != nullptr;) {
      if (key_less_than_probe(t)) {
        t = Traits::right(t);
      } else {
        best = t;
        t = Traits::left(t);
      }
    }
    return best;
  }

  [[nodiscard]] Node* first() const noexcept {
    Node* t = root_;
    while (t != nullptr && Traits::left(t) != nullptr) t = Traits::left(t);
    return t;
  }
  [[nodiscard]] Node* last() const noexcept {
    Node* t = root_;
    while (t != nullptr && Traits::right(t) != nullptr) t = Traits::right(t);
    return t;
  }

  // In-order traversal. `f` must not modify the tree.
  template <typename F>
  void for_each(F&& f) const {
    visit(root_, f);
  }

  // Checks BST order, heap order and augmentation; for tests.
  template <typename AugmentEqual>
  [[nodiscard]] bool valid(AugmentEqual&& augment_ok) const {
    std::size_t count = 0;
    return check(root_, nullptr, nullptr, augment_ok, count) && count == size_;
  }

 private:
  static Node* merge(Node* a, Node* b) noexcept {
    if (a == nullptr) return b;
    if (b == nullptr) return a;
    if (Traits::priority(a) >= Traits::priority(b)) {
      Traits::right(a) = merge(Traits::right(a), b);
      Traits::update(a);
      return a;
    }
    Traits::left(b) = merge(a, Traits::left(b));
    Traits::update(b);
    return b;
  }

  // Splits t into keys < node (left) and keys >= node (right).
  static void split(Node* t, const Node* node, Node*& left, Node*& right) noexcept {
    if (t == nullptr) {
      left = right = nullptr;
      return;
    }
    if (Traits::less(t, node)) {
      split(Traits::right(t), node, Traits::right(t), right);
      left = t;
    } else {
      split(Traits::left(t), node, left, Traits::left(t));
      right = t;
    }
    Traits::update(t);
  }

  static Node* insert_at(Node* t, Node* node) noexcept {
    if (t == nullptr) return node;
    if (Traits::priority(node) > Traits::priority(t)) {
      split(t, node, Traits::left(node), Traits::right(node));
      Traits::update(node);
      return node;
    }
    if (Traits::less(node, t)) {
      Traits::left(t) = insert_at(Traits::left(t), node);
    } else {
      Traits::right(t) = insert_at(Traits::right(t), node);
    }
    Traits::update(t);
    return t;
  }

  static void refresh_at(Node* t, Node* node) noexcept {
    if (t == nullptr) return;
    if (t != node) refresh_at(Traits::less(node, t) ? Traits::left(t) : Traits::right(t), node);
    Traits::update(t);
  }

  static Node* erase_at(Node* t, Node* node) noexcept {
    if (t == nullptr) return nullptr;
    if (t == node) return merge(Traits::left(t), Traits::right(t));
    if (Traits::less(node, t)) {
      Traits::left(t) = erase_at(Traits::left(t), node);
    } else {
      Traits::right(t) = erase_at(Traits::right(t), node);
    }
    Traits::update(t);
    return t;
  }

  template <typename F>
  static void visit(Node* t, F& f) {
    if (t == nullptr) return;
    visit(Traits::left(t), f);
    f(t);
    visit(Traits::right(t), f);
  }

  template <typename AugmentEqual>
  static bool check(Node* t, const Node* lo, const Node* hi, AugmentEqual& augment_ok, std::size_t& count) {
    if (t == nullptr) return true;
    ++count;
    if (lo != nullptr && Traits::less(t, lo)) return false;
    if (hi != nullptr && !Traits::less(t, hi)) return false;
    for (Node* child : {Traits::left(t), Traits::right(t)}) {
      if (child != nullptr && Traits::priority(child) > Traits::priority(t)) return false;
    }
    if (!augment_ok(t)) return false;
    return check(Traits::left(t), lo, t, augment_ok, count) && check(Traits::right(t), t, hi, augment_ok, count);
  }

  Node* root_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace tidepool::util
