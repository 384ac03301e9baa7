package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/compiler/build"
	"github.com/zrtdev/zrt/format/buildcache"
)

func keyCmd() *cobra.Command {
	var cfg, target, cacheDir string
	var noFuse, verbose bool
	var sizes sizeFlags
	c := &cobra.Command{
		Use:   "key MODEL.gguf [--target T] [--config F]",
		Short: "Print the build cache key of a build, for a CI cache step",
		Long: `key prints the key zrtc build --cache would store and look up the bundle
under: 64 hex digits, a SHA-256 over the GGUF's content, the effective
model config, the target, --no-fuse, the kernel source and zrtc's own
identity (see zrtc build --help). Give it the flags the build gets.
Several targets print one "KEY TARGET" line each.

With --cache DIR (or $ZRTC_CACHE) the GGUF's digest is taken from, and
remembered in, the cache, as a build does; otherwise the file is hashed.
-v prints the key's inputs on stderr, to compare two builds that should
share a key.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			targets, err := build.SplitTargets(target)
			if err != nil {
				return err
			}
			o := build.Options{Model: args[0], Targets: targets, Compiler: compiler.Options{ConfigPath: cfg, NoFuse: noFuse, PTXDir: os.Getenv("ZRT_PTX_DIR")}}
			if err := sizes.apply(&o.Compiler); err != nil {
				return err
			}
			if o.Cache = cacheDir; !cmd.Flags().Changed("cache") {
				o.Cache = os.Getenv(cacheEnv)
			}
			keys, err := build.Keys(o)
			if err != nil {
				return err
			}
			for _, in := range keys {
				if verbose {
					fmt.Fprint(cmd.ErrOrStderr(), in.Describe())
				}
				if len(targets) > 1 {
					fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", in.Key(), in.Target)
				} else {
					fmt.Fprintln(cmd.OutOrStdout(), in.Key())
				}
			}
			return nil
		},
	}
	c.Flags().StringVar(&cfg, "config", "", "TOML model config overriding the GGUF defaults")
	c.Flags().StringVar(&target, "target", "", "compile target, or several comma-separated (default: the config's)")
	c.Flags().BoolVar(&noFuse, "no-fuse", false, "the key of a build with --no-fuse")
	c.Flags().StringVar(&cacheDir, "cache", "", "take the GGUF's digest from this cache's memo (default $"+cacheEnv+")")
	c.Flags().BoolVarP(&verbose, "verbose", "v", false, "print the key's inputs on stderr")
	sizes.register(c)
	return c
}

func cacheCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "cache",
		Short: "List or prune a build cache (zrtc build --cache DIR)",
		Long: `cache lists and prunes a build cache directory. DIR defaults to $ZRTC_CACHE.

Entries are bundles named by their build key; an entry's last use is the
last build that added or reused it, and prune removes the least recently
used first. A bundle a build put in place by hard links keeps its files
when the entry is pruned. Prune waits for builds using the cache to be
done with it, and they for it.`,
	}
	c.AddCommand(cacheLsCmd(), cachePruneCmd())
	return c
}

// openCache opens the cache named by args or $ZRTC_CACHE.
func openCache(args []string) (*buildcache.Cache, error) {
	dir := os.Getenv(cacheEnv)
	if len(args) > 0 {
		dir = args[0]
	}
	if dir == "" {
		return nil, fmt.Errorf("no cache directory: name one, or set $%s", cacheEnv)
	}
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	return buildcache.Open(dir)
}

func cacheLsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "ls [DIR]",
		Short: "List the entries, least recently used first, with size, last use, target and model",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := openCache(args)
			if err != nil {
				return err
			}
			return build.ListCache(cmd.OutOrStdout(), c)
		},
	}
}

func cachePruneCmd() *cobra.Command {
	var max byteSize
	c := &cobra.Command{
		Use:   "prune [DIR] --max-size N",
		Short: "Remove least recently used entries until the cache fits N bytes (e.g. 50GiB; 0 empties it)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("max-size") {
				return fmt.Errorf("cache prune: --max-size is required (0 removes every entry)")
			}
			c, err := openCache(args)
			if err != nil {
				return err
			}
			return build.PruneCache(cmd.OutOrStdout(), c, int64(max))
		},
	}
	c.Flags().Var(&max, "max-size", "largest total size of the entries to keep, e.g. 50GiB")
	return c
}
