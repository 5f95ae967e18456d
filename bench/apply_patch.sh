# Sourced by the device scripts: apply_patch [-R] FILE applies (or with -R takes out) a `git diff`
# patch to the tree in the working directory. git apply works outside a repository too (the device
# copy of the tree has none); patch(1) where the image has no git.
apply_patch() {
  if command -v git > /dev/null; then git apply "$@"; else patch -p1 --quiet "${@:1:$#-1}" < "${@: -1}"; fi
}
