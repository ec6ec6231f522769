package registry

import (
	"archive/tar"
	"context"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestPushThenPull pushes an image to the registry and reads it back as a
// client would: the config names the platform and the layers, and the one
// layer holds the files, links and directories asked for, parents first.
func TestPushThenPull(t *testing.T) {
	r, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Error(err)
		}
	})
	src := filepath.Join(t.TempDir(), "prog")
	if err := os.WriteFile(src, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ref, err := r.Push(context.Background(), "t/img:v1", Image{
		Files:    map[string]string{"/usr/bin/prog": src},
		Content:  map[string][]byte{"/etc/marker": []byte("m\n")},
		Symlinks: map[string]string{"/bin": "usr/bin"},
		Dirs:     []string{"/proc"},
		Env:      []string{"PATH=/usr/bin"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if ref != r.Addr+"/t/img:v1" {
		t.Errorf("ref = %q", ref)
	}
	tag, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(tag)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OS != "linux" || cfg.Architecture != "amd64" || cfg.RootFS.Type != "layers" || len(cfg.RootFS.DiffIDs) != 1 {
		t.Errorf("config: os %q arch %q rootfs %+v", cfg.OS, cfg.Architecture, cfg.RootFS)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var got []string
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		e := h.Name
		switch h.Typeflag {
		case tar.TypeSymlink:
			e += " -> " + h.Linkname
		case tar.TypeReg:
			body, _ := io.ReadAll(tr)
			e += " " + string(body) + " " + os.FileMode(h.Mode).String()
		}
		got = append(got, e)
	}
	want := []string{"bin -> usr/bin", "etc/", "etc/marker m\n -rw-r--r--", "proc/", "usr/", "usr/bin/", "usr/bin/prog #!/bin/sh\n -rwxr-xr-x"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("layer:\n got %q\nwant %q", got, want)
	}
	if _, err := r.Push(context.Background(), "t/bad:v1", Image{Content: map[string][]byte{"rel/path": nil}}); err == nil {
		t.Error("a relative path in the image was accepted")
	}
}
