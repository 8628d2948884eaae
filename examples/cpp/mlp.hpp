// A synthetic classification task and a one-hidden-layer MLP with hand-written backprop, enough to
// show how gradient compression affects training without any framework.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

constexpr int kInputs = 64;
constexpr int kClasses = 10;

struct Batch {
  explicit Batch(int n) : x(static_cast<size_t>(n) * kInputs), y(static_cast<size_t>(n)) {}
  int size() const { return static_cast<int>(y.size()); }
  std::vector<float> x;  // row-major, size() x kInputs
  std::vector<int> y;
};

// Labels are the argmax of a fixed random teacher network (64 -> 32 tanh -> 10): learnable, but not
// linearly separable, and unlimited in size, so every rank draws its own shard.
class Task {
 public:
  explicit Task(uint64_t seed) : w1_(kInputs * kTeacherHidden), w2_(kTeacherHidden * kClasses), test_(kTestSize) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> n(0.0f, 1.0f);
    for (float& w : w1_) w = n(rng) / std::sqrt(static_cast<float>(kInputs));
    for (float& w : w2_) w = n(rng) / std::sqrt(static_cast<float>(kTeacherHidden));
    std::mt19937_64 testRng(seed ^ 0x7e57ull);
    sample(testRng, test_);
  }

  void sample(std::mt19937_64& rng, Batch& b) const {
    std::normal_distribution<float> n(0.0f, 1.0f);
    for (float& v : b.x) v = n(rng);
    float h[kTeacherHidden];
    for (int s = 0; s < b.size(); s++) {
      const float* x = &b.x[static_cast<size_t>(s) * kInputs];
      for (int j = 0; j < kTeacherHidden; j++) {
        float acc = 0;
        for (int i = 0; i < kInputs; i++) acc += x[i] * w1_[i * kTeacherHidden + j];
        h[j] = std::tanh(acc);
      }
      int best = 0;
      float bestLogit = -1e30f;
      for (int c = 0; c < kClasses; c++) {
        float acc = 0;
        for (int j = 0; j < kTeacherHidden; j++) acc += h[j] * w2_[j * kClasses + c];
        if (acc > bestLogit) bestLogit = acc, best = c;
      }
      b.y[s] = best;
    }
  }

  const Batch& testSet() const { return test_; }

 private:
  static constexpr int kTeacherHidden = 32;
  static constexpr int kTestSize = 2000;
  std::vector<float> w1_, w2_;
  Batch test_;
};

// x -> W1 x + b1 -> ReLU -> W2 h + b2 -> softmax cross-entropy. All parameters live in one flat
// vector (W1, b1, W2, b2), so the whole gradient is one allreduce with one tensor id.
class Mlp {
 public:
  Mlp(int in, int hidden, int out, uint64_t seed)
      : in_(in), hidden_(hidden), out_(out), params(static_cast<size_t>(in * hidden + hidden + hidden * out + out)) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> n(0.0f, 1.0f);
    float s1 = std::sqrt(2.0f / in), s2 = std::sqrt(1.0f / hidden);
    for (int i = 0; i < in * hidden; i++) params[i] = n(rng) * s1;
    for (int i = 0; i < hidden * out; i++) params[w2() + i] = n(rng) * s2;
  }

  // Mean cross-entropy over the batch; writes d(loss)/d(params) into grad (same layout as params).
  double lossAndGradient(const Batch& b, std::vector<float>& grad) const {
    std::fill(grad.begin(), grad.end(), 0.0f);
    std::vector<float> h(hidden_), p(out_), dh(hidden_);
    double loss = 0;
    const float inv = 1.0f / b.size();
    for (int s = 0; s < b.size(); s++) {
      const float* x = &b.x[static_cast<size_t>(s) * in_];
      forward(x, h.data(), p.data());
      loss -= std::log(std::max(p[b.y[s]], 1e-12f));
      p[b.y[s]] -= 1.0f;  // d(loss)/d(logits) = softmax - onehot
      std::fill(dh.begin(), dh.end(), 0.0f);
      for (int j = 0; j < hidden_; j++) {
        for (int c = 0; c < out_; c++) {
          grad[w2() + j * out_ + c] += h[j] * p[c] * inv;
          dh[j] += params[w2() + j * out_ + c] * p[c];
        }
      }
      for (int c = 0; c < out_; c++) grad[b2() + c] += p[c] * inv;
      for (int j = 0; j < hidden_; j++) {
        if (h[j] <= 0) continue;  // ReLU passes no gradient where it was off
        float d = dh[j] * inv;
        grad[b1() + j] += d;
        for (int i = 0; i < in_; i++) grad[i * hidden_ + j] += x[i] * d;
      }
    }
    return loss / b.size();
  }

  double accuracy(const Batch& b) const {
    std::vector<float> h(hidden_), p(out_);
    int right = 0;
    for (int s = 0; s < b.size(); s++) {
      forward(&b.x[static_cast<size_t>(s) * in_], h.data(), p.data());
      right += std::max_element(p.begin(), p.end()) - p.begin() == b.y[s];
    }
    return static_cast<double>(right) / b.size();
  }

 private:
  size_t b1() const { return static_cast<size_t>(in_) * hidden_; }
  size_t w2() const { return b1() + hidden_; }
  size_t b2() const { return w2() + static_cast<size_t>(hidden_) * out_; }

  // h = ReLU(W1 x + b1), p = softmax(W2 h + b2).
  void forward(const float* x, float* h, float* p) const {
    for (int j = 0; j < hidden_; j++) h[j] = params[b1() + j];
    for (int i = 0; i < in_; i++) {
      const float xi = x[i];
      const float* row = &params[static_cast<size_t>(i) * hidden_];
      for (int j = 0; j < hidden_; j++) h[j] += xi * row[j];
    }
    for (int j = 0; j < hidden_; j++) h[j] = std::max(h[j], 0.0f);
    float maxLogit = -1e30f;
    for (int c = 0; c < out_; c++) {
      float acc = params[b2() + c];
      for (int j = 0; j < hidden_; j++) acc += h[j] * params[w2() + j * out_ + c];
      p[c] = acc;
      maxLogit = std::max(maxLogit, acc);
    }
    float sum = 0;
    for (int c = 0; c < out_; c++) sum += p[c] = std::exp(p[c] - maxLogit);
    for (int c = 0; c < out_; c++) p[c] /= sum;
  }

  int in_, hidden_, out_;

 public:
  std::vector<float> params;
};
