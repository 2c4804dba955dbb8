// The lab's own programs, one package main per directory (tools/k8s-bins/build.sh builds every one,
// statically, and lab/images.ts packs each into an image). Standard library only.
module stockade.lab/programs

go 1.25
