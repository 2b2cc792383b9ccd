// Specification of util's data structures, each against a standard-library
// model under random operations: IntrusiveTreap (order, heap order, the
// subtree augmentation, lower_bound) and AddressMap (insert, replace, find,
// erase with backward shift across growth and wrap-around).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "util/util.hpp"

namespace tidepool::util {
namespace {

struct Node {
  std::uint64_t key = 0;
  std::uint64_t weight = 0;
  std::uint64_t heaviest = 0;  // augmentation: the largest weight in the subtree
  std::uint32_t priority = 0;
  Node* left = nullptr;
  Node* right = nullptr;
};

struct NodeTraits {
  static Node*& left(Node* n) { return n->left; }
  static Node*& right(Node* n) { return n->right; }
  static std::uint32_t priority(const Node* n) { return n->priority; }
  static bool less(const Node* a, const Node* b) { return a->key < b->key; }
  static void update(Node* n) {
    n->heaviest = n->weight;
    for (const Node* child : {n->left, n->right}) {
      if (child != nullptr) n->heaviest = std::max(n->heaviest, child->heaviest);
    }
  }
};

using Treap = IntrusiveTreap<Node, NodeTraits>;

bool augmentation_holds(const Node* n) {
  std::uint64_t expected = n->weight;
  for (const Node* child : {n->left, n->right}) {
    if (child != nullptr) expected = std::max(expected, child->heaviest);
  }
  return n->heaviest == expected;
}

TEST(IntrusiveTreap, RandomInsertsAndErasesKeepOrderHeapAndAugmentationAgainstAModel) {
  std::mt19937_64 random(7);
  std::vector<Node> nodes(2000);
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    nodes[i].key = i * 3 + 1;  // distinct keys, with gaps for lower_bound probes
    nodes[i].weight = random() % 100000;
    nodes[i].priority = static_cast<std::uint32_t>(random());
  }
  Treap tree;
  std::set<std::size_t> in_tree;
  for (int step = 0; step < 20000; ++step) {
    const std::size_t i = random() % nodes.size();
    if (in_tree.count(i) != 0) {
      tree.erase(&nodes[i]);
      in_tree.erase(i);
    } else {
      tree.insert(&nodes[i]);
      in_tree.insert(i);
    }
    if (step % 997 == 0 || step == 19999) {
      ASSERT_TRUE(tree.valid(augmentation_holds)) << "step " << step;
    }
    ASSERT_EQ(tree.size(), in_tree.size());
    ASSERT_EQ(tree.empty(), in_tree.empty());
  }
  // In-order traversal is the model's order, and the root's augmentation
  // is the heaviest node present.
  std::vector<std::uint64_t> walked;
  tree.for_each([&](const Node* n) { walked.push_back(n->key); });
  std::vector<std::uint64_t> expected;
  std::uint64_t heaviest = 0;
  for (std::size_t i : in_tree) {
    expected.push_back(nodes[i].key);
    heaviest = std::max(heaviest, nodes[i].weight);
  }
  EXPECT_EQ(walked, expected);
  ASSERT_NE(tree.root(), nullptr);
  EXPECT_EQ(tree.root()->heaviest, heaviest);
  EXPECT_EQ(tree.first()->key, expected.front());
  EXPECT_EQ(tree.last()->key, expected.back());
  // lower_bound: the first key not less than the probe, for probes between,
  // on, below and above the keys.
  for (std::uint64_t probe = 0; probe < nodes.size() * 3 + 3; ++probe) {
    const Node* found = tree.lower_bound([&](const Node* n) { return n->key < probe; });
    const auto model = std::lower_bound(expected.begin(), expected.end(), probe);
    if (model == expected.end()) {
      ASSERT_EQ(found, nullptr) << probe;
    } else {
      ASSERT_NE(found, nullptr) << probe;
      ASSERT_EQ(found->key, *model) << probe;
    }
  }
  for (std::size_t i : in_tree) tree.erase(&nodes[i]);
  EXPECT_TRUE(tree.empty());
  EXPECT_EQ(tree.root(), nullptr);
  EXPECT_EQ(tree.first(), nullptr);
}

TEST(IntrusiveTreap, AnEmptyTreeAnswersNothing) {
  Treap tree;
  EXPECT_TRUE(tree.valid(augmentation_holds));
  EXPECT_EQ(tree.lower_bound([](const Node*) { return false; }), nullptr);
  EXPECT_EQ(tree.first(), nullptr);
  EXPECT_EQ(tree.last(), nullptr);
}

struct Value {
  int id = 0;
};

TEST(AddressMap, RandomWorkAgreesWithAModelThroughGrowthAndCollisions) {
  std::mt19937_64 random(11);
  std::vector<Value> values(4096);
  for (std::size_t i = 0; i < values.size(); ++i) values[i].id = static_cast<int>(i);
  AddressMap<Value> map(16);  // small, so it grows several times
  std::map<std::uintptr_t, Value*> model;
  // Keys on a 2 MiB grid and a few at 512-byte steps: aligned addresses, as
  // the pool uses, collide in the low bits a poor hash would use.
  auto key_of = [](std::uint64_t r) -> std::uintptr_t {
    const std::uintptr_t base = std::uintptr_t{0x7f0000000000};
    return (r & 1) != 0 ? base + (r % 3000) * (std::uintptr_t{2} << 20) : base + (r % 3000) * 512;
  };
  for (int step = 0; step < 100000; ++step) {
    const std::uint64_t r = random();
    const std::uintptr_t key = key_of(r >> 2);
    switch (r & 3) {
      case 0:
      case 1: {  // insert or replace
        Value* v = &values[(r >> 20) % values.size()];
        map.insert(key, v);
        model[key] = v;
        break;
      }
      case 2: {  // erase
        Value* erased = map.erase(key);
        const auto it = model.find(key);
        ASSERT_EQ(erased, it == model.end() ? nullptr : it->second) << "step " << step;
        if (it != model.end()) model.erase(it);
        break;
      }
      default: {  // find
        const auto it = model.find(key);
        ASSERT_EQ(map.find(key), it == model.end() ? nullptr : it->second) << "step " << step;
      }
    }
    ASSERT_EQ(map.size(), model.size());
  }
  // Every key the model holds is found; erasing them all empties the map.
  for (const auto& [key, value] : model) ASSERT_EQ(map.find(key), value);
  for (const auto& [key, value] : model) ASSERT_EQ(map.erase(key), value);
  EXPECT_EQ(map.size(), 0u);
  EXPECT_EQ(map.find(key_of(1)), nullptr);
}

TEST(AddressMap, KeyZeroIsNeverStoredAndAnAbsentKeyErasesNothing) {
  AddressMap<Value> map;
  Value v;
  EXPECT_EQ(map.find(0), nullptr);
  EXPECT_EQ(map.erase(0), nullptr);
  map.insert(0x1000, &v);
  EXPECT_EQ(map.erase(0x2000), nullptr);
  EXPECT_EQ(map.size(), 1u);
  EXPECT_EQ(map.erase(0x1000), &v);
  EXPECT_EQ(map.erase(0x1000), nullptr);
}

}  // namespace
}  // namespace tidepool::util
