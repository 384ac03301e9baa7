package zrtp

import (
	"fmt"
	"time"

	"github.com/zrtdev/zrt/format/bytesize"
)

// TargetError is a target Extract was asked for that the pack holds no
// member for: a mistake in the call.
type TargetError struct {
	Target string
	Have   []string // the pack's members' targets
}

func (e *TargetError) Error() string {
	return fmt.Sprintf("unpack: --target %s: the pack holds %s", e.Target, e.Have)
}

// Usage marks the error as a mistake in the call (the commands' exit
// status 2).
func (e *TargetError) Usage() bool { return true }

// Extract unpacks the pack at path into out (zrtc unpack): the whole set
// or bundle, or with target only that member, as a bundle. say (nil:
// quiet) hears what it unpacks, its progress at most once a second, and
// what it wrote.
func Extract(path, target, out string, say func(format string, a ...any)) error {
	if say == nil {
		say = func(string, ...any) {}
	}
	r, err := Open(path)
	if err != nil {
		return err
	}
	defer r.Close()
	start, last := time.Now(), time.Now()
	r.Progress = func(file string, done, total int64) {
		if time.Since(last) >= time.Second {
			say("unpack: %s of %s (%s)", bytesize.Format(done), bytesize.Format(total), file)
			last = time.Now()
		}
	}
	x := r.Index()
	what, files, raw := "", 0, int64(0)
	if target == "" {
		_, raw = x.Sizes()
		files = len(x.Files)
		for _, m := range x.Members {
			files += len(m.Files)
		}
		say("unpacking %s (%s) into %s", path, bytesize.Format(raw), out)
		err = r.Unpack(out)
	} else {
		m, ok := x.Member(target)
		if !ok {
			return &TargetError{Target: target, Have: x.Targets()}
		}
		for _, f := range m.Files {
			raw += f.RawSize
		}
		what, files = " member "+target, len(m.Files)
		say("unpacking%s of %s (%s) into %s", what, path, bytesize.Format(raw), out)
		err = r.UnpackMember(m, out)
	}
	if err != nil {
		return err
	}
	say("unpacked%s into %s: %d files, %s in %s", what, out, files, bytesize.Format(raw), time.Since(start).Round(time.Millisecond))
	return nil
}

// Targets lists the targets of the pack's members.
func (x *Index) Targets() []string {
	var t []string
	for _, m := range x.Members {
		t = append(t, m.Target)
	}
	return t
}

// Pack writes the bundle or set at src as a pack at dst (Write) and tells
// say (nil: nobody) what it wrote: its members, its bytes before and
// after compression, and how long it took.
func Pack(src, dst string, say func(format string, a ...any)) error {
	start := time.Now()
	if err := Write(dst, src); err != nil {
		return err
	}
	r, err := Open(dst)
	if err != nil {
		return err
	}
	defer r.Close()
	packed, raw := r.Index().Sizes()
	if say != nil {
		say("packed %s into %s: %d members, %d B → %d B (%.3f), %s",
			src, dst, len(r.Index().Members), raw, packed, Ratio(packed, raw), time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// Ratio is packed over raw bytes, 0 for none.
func Ratio(packed, raw int64) float64 {
	if raw == 0 {
		return 0
	}
	return float64(packed) / float64(raw)
}
