// Package registry runs an OCI image registry on loopback for sandboxes and
// tests (go-containerregistry's in-memory registry) and pushes small images
// built from files already on the machine, so Slurm's OCI containers run end
// to end where there is no container engine and no network: the job's node
// pulls the image from here with skopeo, as it would from a site registry.
package registry

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path"
	"sort"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Registry is a running registry. It keeps images in memory and speaks
// plain HTTP on 127.0.0.1 only.
type Registry struct {
	// Addr is host:port, e.g. 127.0.0.1:40123.
	Addr string
	srv  *http.Server
	done chan error
}

// Start serves a registry on a free loopback port.
func Start() (*Registry, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("registry: listen: %w", err)
	}
	r := &Registry{
		Addr: ln.Addr().String(),
		srv: &http.Server{
			Handler:           registry.New(registry.Logger(log.New(io.Discard, "", 0))),
			ReadHeaderTimeout: 10 * time.Second,
		},
		done: make(chan error, 1),
	}
	go func() { r.done <- r.srv.Serve(ln) }()
	return r, nil
}

// Close stops the registry at once, closing connections clients keep
// open; its images are gone.
func (r *Registry) Close() error {
	err := r.srv.Close()
	if serr := <-r.done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// Image is a one-layer image. Paths inside it are absolute; parent
// directories are made as needed.
type Image struct {
	// Files copies host files (mode kept, links followed) to paths inside.
	Files map[string]string
	// Content writes these bytes, mode 0644.
	Content map[string][]byte
	// Dirs are (empty) directories, mode 0755: an OCI runtime mounts /proc,
	// /dev and /sys only where the rootfs has them.
	Dirs []string
	// Symlinks map a path inside to its target.
	Symlinks map[string]string
	// Env and Cmd go to the image's config.
	Env []string
	Cmd []string
}

// Push builds img and pushes it as repoTag (e.g. "trainyard/job:v1") and
// returns the reference a node pulls: Addr/repoTag.
func (r *Registry) Push(ctx context.Context, repoTag string, img Image) (string, error) {
	layerTar, err := img.tar()
	if err != nil {
		return "", err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerTar)), nil })
	if err != nil {
		return "", fmt.Errorf("registry: layer: %w", err)
	}
	base, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{
		Architecture: "amd64", OS: "linux", RootFS: v1.RootFS{Type: "layers"},
		Config: v1.Config{Env: img.Env, Cmd: img.Cmd},
	})
	if err != nil {
		return "", err
	}
	im, err := mutate.AppendLayers(base, layer)
	if err != nil {
		return "", err
	}
	ref := r.Addr + "/" + repoTag
	tag, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		return "", fmt.Errorf("registry: %w", err)
	}
	if err := remote.Write(tag, im, remote.WithContext(ctx)); err != nil {
		return "", fmt.Errorf("registry: push %s: %w", ref, err)
	}
	return ref, nil
}

// tar writes the layer: directories first, each entry once, in a stable order.
func (img Image) tar() ([]byte, error) {
	type entry struct {
		hdr  tar.Header
		body []byte
	}
	entries := map[string]entry{}
	var addDir func(p string)
	addDir = func(p string) {
		if p == "/" || p == "." {
			return
		}
		if _, ok := entries[p]; ok {
			return
		}
		addDir(path.Dir(p))
		entries[p] = entry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: p[1:] + "/", Mode: 0o755}}
	}
	add := func(p string, hdr tar.Header, body []byte) error {
		if !path.IsAbs(p) || path.Clean(p) != p {
			return fmt.Errorf("registry: image path %q is not a clean absolute path", p)
		}
		addDir(path.Dir(p))
		hdr.Name, hdr.Size = p[1:], int64(len(body))
		entries[p] = entry{hdr: hdr, body: body}
		return nil
	}
	for _, d := range img.Dirs {
		if !path.IsAbs(d) {
			return nil, fmt.Errorf("registry: image dir %q is not absolute", d)
		}
		addDir(path.Clean(d))
	}
	for p, src := range img.Files {
		fi, err := os.Stat(src)
		if err != nil {
			return nil, fmt.Errorf("registry: %w", err)
		}
		body, err := os.ReadFile(src)
		if err != nil {
			return nil, fmt.Errorf("registry: %w", err)
		}
		if err := add(p, tar.Header{Typeflag: tar.TypeReg, Mode: int64(fi.Mode().Perm())}, body); err != nil {
			return nil, err
		}
	}
	for p, body := range img.Content {
		if err := add(p, tar.Header{Typeflag: tar.TypeReg, Mode: 0o644}, body); err != nil {
			return nil, err
		}
	}
	for p, target := range img.Symlinks {
		if err := add(p, tar.Header{Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777}, nil); err != nil {
			return nil, err
		}
	}
	names := make([]string, 0, len(entries))
	for p := range entries {
		names = append(names, p)
	}
	sort.Strings(names) // a parent sorts before its children
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range names {
		e := entries[p]
		if err := tw.WriteHeader(&e.hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ShellImage is the smallest image that runs POSIX shell scripts: dash as
// /bin/sh and cat, with the C library they need, copied from the system
// tree at root (a Slurm chroot), and /etc/trainyard-image holding marker,
// so a task can tell it runs in this image rather than on the bare node.
// It has /dev, /proc, /sys, /tmp and /root for the OCI runtime's mounts.
func ShellImage(root, marker string) Image {
	lib := "/usr/lib/x86_64-linux-gnu/"
	from := func(p string) string { return path.Join(root, p) }
	return Image{
		Files: map[string]string{
			"/usr/bin/dash":              from("/usr/bin/dash"),
			"/usr/bin/cat":               from("/usr/bin/cat"),
			lib + "libc.so.6":            from(lib + "libc.so.6"),
			lib + "ld-linux-x86-64.so.2": from(lib + "ld-linux-x86-64.so.2"),
		},
		Symlinks: map[string]string{
			"/bin": "usr/bin", "/lib": "usr/lib", "/usr/bin/sh": "dash",
			"/lib64/ld-linux-x86-64.so.2": lib + "ld-linux-x86-64.so.2",
		},
		Content: map[string][]byte{"/etc/trainyard-image": []byte(marker + "\n")},
		Dirs:    []string{"/dev", "/proc", "/sys", "/tmp", "/root"},
		Env:     []string{"PATH=/usr/bin:/bin"},
	}
}
