# Sourced by benches/iteration.sh and benches/queue.sh: the one shape of a benchmark
# repository's tracked files (a few hundred leaf directories up to four levels deep, files of
# 0.1–10 KB, file i in directory int(i / (n / d)), so neighbours share a directory).

# The directories of a repository of $1 files, one per line.
bench_dirs() {
  awk -v d="$(( $1 / 50 > 100 ? $1 / 50 : 100 ))" 'BEGIN { split("src lib tests docs tools", top, " ");
    for (i = 0; i < d; i++) { p = top[i % 5 + 1] "/mod" int(i / 5) % 40 "/pkg" i;
      if (i % 3 == 0) p = p "/internal"; print p } }'
}

# `git fast-import` file commands for $1 files in the directories listed in the file $2 (inside
# a commit the caller opens).
bench_files() {
  awk -v n="$1" 'NR == FNR { dir[NR - 1] = $0; dn = NR; next } END {
    for (j = 0; j < 140; j++) block = block sprintf("    let value_%02d = compute(input, %d); // keeps the example realistic\n", j, j * 7)
    per = n / dn
    for (i = 0; i < n; i++) {
      r = (i * 7919 % 1000) / 1000; size = int(100 + 10000 * r * r * r)
      c = "// file " i "\n" substr(block, 1 + (i % 13) * 7, size) "\n" # (mawk: no sprintf over 8 KiB)
      printf "M 100644 inline %s/f%06d.rs\ndata %d\n", dir[int(i / per)], i, length(c); print c
    } }' "$2" /dev/null
}

# A fast-import command for a file $1 holding the text $2 (ASCII).
bench_inline() { printf 'M 100644 inline %s\ndata %d\n%s\n' "$1" "${#2}" "$2"; }
