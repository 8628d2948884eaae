#include "transport/host_key.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <map>

#include "core/config.hpp"

namespace qccl {

std::string localHostKey() {
  const std::string forced = env::hostId();
  if (!forced.empty()) return "id:" + forced;
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) name[0] = '\0';
  std::string key = name;
  struct stat ns {};
  if (stat("/proc/self/ns/net", &ns) == 0)
    key += "/net:" + std::to_string(static_cast<unsigned long long>(ns.st_dev)) + ":" +
           std::to_string(static_cast<unsigned long long>(ns.st_ino));
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string id;
  if (boot && std::getline(boot, id)) key += "/boot:" + id;
  return key;
}

std::vector<int> hostsFromKeys(const std::vector<std::string>& keys) {
  std::map<std::string, int> index;
  std::vector<int> out(keys.size());
  for (size_t r = 0; r < keys.size(); ++r)
    out[r] = index.emplace(keys[r], static_cast<int>(index.size())).first->second;
  return out;
}

}  // namespace qccl
