#!/usr/bin/env bash
# A stand-in for the CPM plugin's `hooks/lib/coverage-rollup.sh`, written for ralph's tests.
#
# It follows the contract of the roll-up shipped with cpm 3.11.0, quirks included, so ralph is
# tested against what the real script does rather than against what it was assumed to do:
#
#   coverage-rollup.sh --epic EPIC... [--verdict]      rows of the named epics' matrices
#   coverage-rollup.sh --spec SPEC [--matrix-dir DIR] [--verdict]
#
# - stdout carries tab-separated records only; every diagnostic goes to stderr (including
#   the "project root ... (via ...)" line the real script prints on every run);
# - relative paths resolve against $CLAUDE_PROJECT_DIR first, then the git top level, then
#   $PWD; records name paths relative to that root;
# - epic scope: each epic's matrix is its path with the first `-epic-` replaced by
#   `-coverage-`; MATRIX and ROW / CRITERION / UNRESOLVED records, and no SUMMARY;
# - spec scope: the matrices under docs/epics/ (`NN-coverage-*` or `NN-MM-coverage-*`) whose
#   `**Source spec**` names the spec (basenames compared); MATRIX, REQ, STATE (untraced,
#   in-progress, delivered), EXCLUDED (Won't Have), a requirement-level SUMMARY, then the rows;
# - exit codes: 0 computed (with --verdict: nothing outstanding), 3 outstanding, 5 only
#   [target] rows outstanding, 4 no matrix names the spec (--verdict only; else 1),
#   1 an input could not be read (an unreadable spec, a missing matrix, a spec with no
#   requirement bullets), 2 usage.
#
# Matrix rows are `| # | Requirement | Spec text | Story criterion | Covered by | Approach |
# Verified |`; `✓` alone in the last cell is verified. Spec requirements are `- **FRn** — text`
# bullets under `## Functional Requirements` (MoSCoW `###` headings) or
# `## Non-Functional Requirements`. Kept small: no scope deferrals, no range labels.

set -u

die() { echo "coverage-rollup: $1" >&2; exit "${2:-1}"; }

mode="" spec="" matrix_dir="" verdict=no
epics=()
while [ $# -gt 0 ]; do
  case "$1" in
    --spec) [ $# -ge 2 ] || die "--spec needs a spec path" 2
            [ "$mode" != epic ] || die "--spec and --epic are alternatives" 2
            mode=spec spec=$2; shift 2 ;;
    --epic) [ "$mode" != spec ] || die "--spec and --epic are alternatives" 2
            mode=epic; shift
            while [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; do epics+=("$1"); shift; done
            [ ${#epics[@]} -gt 0 ] || die "--epic needs at least one epic path" 2 ;;
    --matrix-dir) [ $# -ge 2 ] || die "--matrix-dir needs a directory" 2
            matrix_dir=$2; shift 2 ;;
    --verdict) verdict=yes; shift ;;
    *) die "unrecognised argument: $1" 2 ;;
  esac
done
[ -n "$mode" ] || die "no scope given: pass --spec or --epic" 2

if [ -n "${CLAUDE_PROJECT_DIR:-}" ]; then root=$CLAUDE_PROJECT_DIR via=CLAUDE_PROJECT_DIR
elif root=$(git rev-parse --show-toplevel 2>/dev/null) && [ -n "$root" ]; then via=git
else root=$PWD via=PWD; fi
[ -d "$root" ] || die "cannot resolve a project root: '$root' (via $via) is not a directory"
echo "coverage-rollup: project root $root (via $via)" >&2

abs() { case "$1" in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$root/$1" ;; esac; }
rel() { case "$1" in "$root"/*) printf '%s\n' "${1#"$root"/}" ;; *) printf '%s\n' "$1" ;; esac; }
source_spec() { sed -n 's/^\*\*Source spec\*\*:[[:space:]]*//p' "$1" | head -n 1 | sed 's/[[:space:]]*$//'; }

# A matrix's name: `-coverage-` right after the number (`45-coverage-x`, `45-03-coverage-x`),
# so `45-03-epic-coverage-x.md` is an epic and `45-03-coverage-epic-x.md` a matrix.
is_matrix_name() {
  local prefix=${1%%-coverage-*}
  [ "$prefix" != "$1" ] && [[ $prefix =~ ^[0-9]+(-[0-9]+)?$ ]]
}

# The rows of one matrix as ROW / CRITERION / UNRESOLVED records.
matrix_rows() {
  awk -F'|' -v m="$2" '
    function trim(s) { gsub(/^[ \t]+|[ \t]+$/, "", s); return s }
    /^```/ { fence = !fence; next }
    fence || NF < 8 || trim($2) !~ /^[0-9]+$/ { next }
    {
      label = trim($3); spec_text = trim($4); crit = trim($5); story = trim($6)
      tag = $7; gsub(/`/, "", tag); tag = trim(tag)
      state = (trim($8) == "✓") ? "verified" : "unverified"
      crit_tag = ""; s = crit
      while (match(s, /\[[a-z]+\]/)) {
        crit_tag = crit_tag (crit_tag == "" ? "" : " ") substr(s, RSTART, RLENGTH)
        s = substr(s, RSTART + RLENGTH)
      }
      if (index(label, "(story-originated)") > 0 || spec_text == "—") {
        printf "CRITERION\t%s\t%s\t%s\t%s\t%s\t%s\n", m, label, story, state, tag, crit_tag
        next
      }
      base = ""
      if (match(label, /^[A-Z]+[0-9]+/)) {
        base = substr(label, 1, RLENGTH)
        rest = substr(label, RLENGTH + 1)
        sub(/ \(.*\)$/, "", rest)
        if (rest ~ /[A-Z]+[0-9]+/) base = ""      # `ENV1–ENV5` names several: unresolved
      }
      if (base == "") printf "UNRESOLVED\t%s\t%s\t%s\n", m, label, story
      else printf "ROW\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m, base, label, story, state, tag, crit_tag
    }' "$1"
}

# A spec's requirement bullets: LABEL<TAB>HEADING<TAB>TEXT.
requirements() {
  awk '
    /^```/ { fence = !fence; next }
    fence { next }
    /^## / {
      inreq = index($0, "## Functional Requirements") == 1 || index($0, "## Non-Functional Requirements") == 1
      heading = index($0, "## Non-Functional") == 1 ? "Non-Functional" : ""
      next
    }
    /^### / { if (inreq) heading = substr($0, 5); next }
    inreq && /^- \*\*/ {
      body = substr($0, 5); sub(/\*\*/, "", body)
      if (!match(body, /^[A-Z]+[0-9]+/)) next
      label = substr(body, 1, RLENGTH); text = substr(body, RLENGTH + 1)
      sub(/^[ \t]*(—|-)?[ \t]*/, "", text)
      printf "%s\t%s\t%s\n", label, heading, text
    }' "$1"
}

epic_scope() {
  local e a b m matrices=()
  for e in "${epics[@]}"; do
    a=$(abs "$e") b=${a##*/}
    case "$b" in *-epic-*) ;; *) echo "coverage-rollup: not an epic path: $e" >&2; return 1 ;; esac
    m="${a%/*}/${b/-epic-/-coverage-}"
    [ -r "$m" ] || { echo "coverage-rollup: cannot read the matrix for $e — looked for $m" >&2; return 1; }
    matrices+=("$m")
  done
  for m in "${matrices[@]}"; do printf 'MATRIX\t%s\t%s\n' "$(rel "$m")" "$(source_spec "$m")"; done
  for m in "${matrices[@]}"; do matrix_rows "$m" "$(rel "$m")"; done
}

spec_scope() {
  local a base dir m s reqs rows matrices=()
  a=$(abs "$spec")
  [ -r "$a" ] && [ -f "$a" ] || { echo "coverage-rollup: cannot read spec: $a" >&2; return 1; }
  base=${a##*/}
  dir=${matrix_dir:-$root/docs/epics}
  if [ ! -d "$dir" ]; then
    [ -z "$matrix_dir" ] || { echo "coverage-rollup: matrix directory does not exist: $dir" >&2; return 1; }
    echo "coverage-rollup: no matrix directory at $dir — nothing names $base" >&2
    return 4
  fi
  for m in "$dir"/*-coverage-*.md; do
    [ -f "$m" ] && is_matrix_name "${m##*/}" || continue
    s=$(source_spec "$m")
    [ -n "$s" ] && [ "${s##*/}" = "$base" ] && matrices+=("$m")
  done
  if [ ${#matrices[@]} -eq 0 ]; then
    echo "coverage-rollup: no matrix in $dir names $base as its source spec" >&2
    return 4
  fi
  reqs=$(requirements "$a")
  [ -n "$reqs" ] || { echo "coverage-rollup: no requirements found in $a — expected '- **FRn** — …' bullets" >&2; return 1; }
  for m in "${matrices[@]}"; do printf 'MATRIX\t%s\t%s\n' "$(rel "$m")" "$(source_spec "$m")"; done
  printf '%s\n' "$reqs" | awk -F'\t' '{ printf "REQ\t%s\t%s\t%s\n", $1, $2, $3 }'
  rows=$(for m in "${matrices[@]}"; do matrix_rows "$m" "$(rel "$m")"; done)
  # Requirement states: no rows untraced, every row verified delivered, else in progress.
  { printf '%s\n' "$reqs" | sed 's/^/R\t/'; printf '%s\n' "$rows"; } | awk -F'\t' '
    $1 == "R" && !($2 in heading) { order[++n] = $2; heading[$2] = $3 }
    $1 == "ROW" { count[$3]++; if ($6 == "verified") ok[$3]++ }
    END {
      for (i = 1; i <= n; i++) {
        l = order[i]
        if (heading[l] ~ /^Won/ && heading[l] ~ /Have/) { excluded[l] = 1; continue }
        total++
        st[l] = !count[l] ? "untraced" : (ok[l] == count[l] ? "delivered" : "in-progress")
        tally[st[l]]++
      }
      split("untraced in-progress delivered", states, " ")
      for (k = 1; k <= 3; k++)
        for (i = 1; i <= n; i++)
          if (!(order[i] in excluded) && st[order[i]] == states[k])
            printf "STATE\t%s\t%s\t%s\n", order[i], heading[order[i]], states[k]
      for (i = 1; i <= n; i++)
        if (order[i] in excluded) printf "EXCLUDED\t%s\t%s\n", order[i], heading[order[i]]
      printf "SUMMARY\tspec\t%d\t%d\t%d\t%d\n", total, tally["untraced"], tally["delivered"], tally["in-progress"]
    }'
  [ -z "$rows" ] || printf '%s\n' "$rows"
}

run_scope() { if [ "$mode" = spec ]; then spec_scope; else epic_scope; fi; }

if [ "$verdict" = no ]; then
  run_scope
  rc=$?
  [ "$rc" = 4 ] && rc=1
  exit "$rc"
fi

out=$(run_scope)
rc=$?
[ -z "$out" ] || printf '%s\n' "$out"
[ "$rc" = 0 ] || exit "$rc"

# The verdict reads the records just printed. A row is withheld from this environment when
# its tags say [target] and nothing checkable, in both tag columns when both are set.
printf '%s\n' "$out" | awk -F'\t' '
  function target_only(t) { return t ~ /\[target\]/ && t !~ /\[(unit|integration|feature)\]/ }
  function withheld(s, c) { return c != "" ? target_only(s) && target_only(c) : target_only(s) }
  $1 == "ROW" && $6 != "verified" { if (withheld($7, $8)) target = 1; else work = 1 }
  $1 == "CRITERION" && $5 != "verified" { if (withheld($6, $7)) target = 1; else work = 1 }
  $1 == "STATE" && $4 == "untraced" { work = 1 }
  $1 == "UNRESOLVED" { work = 1 }
  END { exit work ? 3 : (target ? 5 : 0) }'
