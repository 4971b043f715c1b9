// Prometheus text format pieces (see prometheus_text.h).
#include "core/prometheus_text.h"

#include <charconv>
#include <cmath>

namespace tensorpar::prometheus {

std::string format_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

std::string format_number(int64_t v) {
  return std::to_string(v);
}

std::string escape_label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string join_labels(const std::string& a, const std::string& b) {
  return a.empty() || b.empty() ? a + b : a + "," + b;
}

void header(std::string& out, const std::string& name, const std::string& help, const char* type) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

namespace {
template <typename T>
void sample_of(std::string& out, const std::string& name, const std::string& labels, T value) {
  out += name + (labels.empty() ? "" : "{" + labels + "}") + " " + format_number(value) + "\n";
}
}  // namespace

void sample(std::string& out, const std::string& name, const std::string& labels, double value) {
  sample_of(out, name, labels, value);
}
void sample(std::string& out, const std::string& name, const std::string& labels, int64_t value) {
  sample_of(out, name, labels, value);
}

void scalar(std::string& out, const std::string& name, const std::string& help, const char* type,
            const std::string& labels, double value) {
  header(out, name, help, type);
  sample(out, name, labels, value);
}
void scalar(std::string& out, const std::string& name, const std::string& help, const char* type,
            const std::string& labels, int64_t value) {
  header(out, name, help, type);
  sample(out, name, labels, value);
}

}  // namespace tensorpar::prometheus
