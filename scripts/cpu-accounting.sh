# Sourced by the benchmark scripts: pure-bash readers of the machine's CPU use (no child process, so
# reading them adds nothing to what they measure), to tell whether others used the cores while a
# benchmark ran.
read_cpu() {  # sets cpu_busy, cpu_total: ticks of all CPUs since boot
  local _label user nice system idle iowait irq softirq steal _rest
  read -r _label user nice system idle iowait irq softirq steal _rest </proc/stat
  cpu_busy=$((user + nice + system + irq + softirq + steal))
  cpu_total=$((cpu_busy + idle + iowait))
}
read_children() {  # sets child_cpu: ticks used by this shell's finished children (cutime + cstime)
  local stat fields
  read -r stat </proc/$$/stat
  read -ra fields <<<"${stat##*) }"  # the fields after "pid (comm) ", from state on
  child_cpu=$((fields[13] + fields[14]))
}
