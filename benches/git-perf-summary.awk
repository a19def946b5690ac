# Sum a git trace2 performance log (GIT_TRACE2_PERF, as `PROFILE=DIR bash benches/iteration.sh`
# writes one per run) per git command: how many ran, their wall time, and the index reads and
# writes, refreshes (stat checks) and directory walks inside them, in ms. The commands ralph runs
# one at a time, so each line belongs to the last command started.
#   awk -f benches/git-perf-summary.awk DIR/git-100000-copied-1.perf
BEGIN { FS = "|" }
function trim(s) { gsub(/^ +| +$/, "", s); return s }
{
  ev = trim($4)
  if (ev == "start") {
    n = split(trim($9), w, " "); c = ""
    for (i = 2; i <= n; i++) {
      if (w[i] == "--git-dir" || w[i] == "--work-tree" || w[i] == "-c" || w[i] == "-C") {
        i++; if (w[i] ~ /^'/) while (i < n && w[i] !~ /'$/) i++  # a quoted value of words
        continue
      }
      if (w[i] ~ /^-/ || w[i] ~ /'/ || w[i] ~ /=/) continue
      c = w[i]; break
    }
    count[c]++
  } else if (ev == "exit") {
    wall[c] += trim($6) * 1000
  } else if (ev == "region_leave") {
    label = trim($9); t = trim($7) * 1000
    if (label ~ /label:do_read_index/) { rd[c] += t; nrd[c]++ }
    else if (label ~ /label:do_write_index/) { wr[c] += t; nwr[c]++ }
    else if (label ~ /label:refresh$/) rf[c] += t
    else if (label ~ /label:read_directory/) dir[c] += t
  }
}
END {
  printf "%-14s %5s %9s %15s %15s %9s %9s\n", "command", "runs", "wall ms", "index reads ms", "index writes ms", "refresh", "walk"
  for (c in count) {
    printf "%-14s %5d %9.1f %5d %9.1f %5d %9.1f %9.1f %9.1f\n", c, count[c], wall[c], nrd[c], rd[c], nwr[c], wr[c], rf[c], dir[c]
    W += wall[c]; R += rd[c]; NRD += nrd[c]; WR += wr[c]; NWR += nwr[c]; N += count[c]
  }
  printf "%-14s %5d %9.1f %5d %9.1f %5d %9.1f\n", "all", N, W, NRD, R, NWR, WR
}
