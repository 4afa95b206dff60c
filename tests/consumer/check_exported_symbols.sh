#!/usr/bin/env bash
# abi.exported_symbols: libsoma's dynamic symbol table holds soma's namespace only (cmake/soma.map).
# Fails naming the first foreign symbols found, e.g. a std::vector or nlohmann::json instantiation
# that a program with another version of that library could bind to. Exit 77 (skipped): not a
# shared library, or no nm.
set -euo pipefail
lib=$1
[[ -f $lib ]] || { echo "not a shared build: $lib missing"; exit 77; }
command -v nm >/dev/null || { echo "nm not found"; exit 77; }
all=$(nm -DC --defined-only "$lib" | cut -d' ' -f3-)
total=$(wc -l <<<"$all")
# Allowed: any name holding "soma::" (soma's functions and types, their type information and
# vtables, and standard containers of soma's types, as the map's one pattern allows).
foreign=$(grep -v 'soma::' <<<"$all" || true)
nforeign=$(grep -c . <<<"$foreign" || true)
echo "libsoma exports $total symbols; $nforeign outside soma's namespace"
if [[ $nforeign -gt 0 ]]; then
  head -20 <<<"$foreign"
  exit 1
fi
for must in 'soma::Error::' 'typeinfo for soma::Error' 'soma::version()'; do
  grep -qF "$must" <<<"$all" || { echo "missing export: $must"; exit 1; }
done
