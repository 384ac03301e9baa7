// Package version is zrt's release number: zrtc records it in every
// bundle it writes, and zrtc and zrt-run print it for --version. It
// imports nothing, so the compiler and the runtime's commands share it
// without depending on each other.
package version

// Release is zrt's release, semantic-versioned.
const Release = "0.1.0"
