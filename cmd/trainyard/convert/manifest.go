package convert

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// SplitDocuments returns the non-empty YAML (or JSON) documents of in.
func SplitDocuments(in []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(in)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, err
		}
		if t := strings.TrimSpace(string(j)); t != "null" && t != "" && t != "{}" {
			docs = append(docs, j)
		}
	}
}

// Manifest is tj as a new object to create, ready to print as YAML or
// JSON: without the empty fields Go's encoder writes (creationTimestamp:
// null, status: {}).
func Manifest(tj *trainer.TrainJob) (map[string]any, error) {
	b, err := json.Marshal(tj)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	if md, ok := m["metadata"].(map[string]any); ok {
		delete(md, "creationTimestamp")
	}
	if st, ok := m["status"].(map[string]any); ok && len(st) == 0 {
		delete(m, "status")
	}
	return m, nil
}
