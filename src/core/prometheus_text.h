// Prometheus' text exposition format (version 0.0.4): the pieces a /metrics page is written
// with. The serving metrics (serve/metrics.h) and a training run's (train/train_metrics.h) use them.
#pragma once

#include <cstdint>
#include <string>

namespace tensorpar::prometheus {

// Shortest text that reads back as the same double; NaN, +Inf and -Inf as Prometheus spells them.
std::string format_number(double v);
std::string format_number(int64_t v);
// A label value with Prometheus' three escapes (backslash, quote, newline).
std::string escape_label(const std::string& v);
// Two label lists ("a=\"x\"") as one, either may be empty.
std::string join_labels(const std::string& a, const std::string& b);
// `# HELP name help` and `# TYPE name type`.
void header(std::string& out, const std::string& name, const std::string& help, const char* type);
// `name{labels} value` (no braces without labels).
void sample(std::string& out, const std::string& name, const std::string& labels, double value);
void sample(std::string& out, const std::string& name, const std::string& labels, int64_t value);
// A header and one sample.
void scalar(std::string& out, const std::string& name, const std::string& help, const char* type,
            const std::string& labels, double value);
void scalar(std::string& out, const std::string& name, const std::string& help, const char* type,
            const std::string& labels, int64_t value);

}  // namespace tensorpar::prometheus
