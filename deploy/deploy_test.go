// Package deploy holds the Kubernetes manifests of a zrt-run deployment
// (docs/deploy.md). Its test decodes every manifest strictly into the real
// API types — k8s.io/api, the Gateway API and its Inference Extension —
// and checks that the objects name each other consistently and that what
// the pods are probed on is served.
package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	inferencev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	objectivev1alpha2 "sigs.k8s.io/gateway-api-inference-extension/apix/v1alpha2"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	"github.com/zrtdev/zrt/runtime/server"
)

// kinds maps a manifest's apiVersion and kind to the type it must decode
// into. A manifest of any other kind fails the test: every object under
// deploy/ is checked.
var kinds = map[string]func() any{
	"v1/ConfigMap":             func() any { return &corev1.ConfigMap{} },
	"v1/PersistentVolumeClaim": func() any { return &corev1.PersistentVolumeClaim{} },
	"v1/Service":               func() any { return &corev1.Service{} },
	"apps/v1/Deployment":       func() any { return &appsv1.Deployment{} },
	inferencev1.GroupVersion.String() + "/InferencePool":            func() any { return &inferencev1.InferencePool{} },
	objectivev1alpha2.GroupVersion.String() + "/InferenceObjective": func() any { return &objectivev1alpha2.InferenceObjective{} },
	gatewayv1.GroupVersion.String() + "/HTTPRoute":                  func() any { return &gatewayv1.HTTPRoute{} },
}

// object is one decoded manifest and where it came from.
type object struct {
	file string
	kind string
	v    any
}

// docSep splits a YAML stream into documents.
var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

// decode reads every document of every .yaml file under dir strictly:
// unknown or duplicate fields, a missing apiVersion or kind, or a kind
// not in kinds are errors.
func decode(dir string) ([]object, error) {
	var objs []object
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !(strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for i, doc := range docSep.Split(string(b), -1) {
			j, err := yaml.YAMLToJSONStrict([]byte(doc))
			if err != nil {
				return fmt.Errorf("%s document %d: %w", p, i, err)
			}
			if string(j) == "null" {
				continue // only comments
			}
			var tm metav1.TypeMeta
			if err := json.Unmarshal(j, &tm); err != nil {
				return fmt.Errorf("%s document %d: %w", p, i, err)
			}
			kind := tm.APIVersion + "/" + tm.Kind
			mk, ok := kinds[kind]
			if !ok {
				return fmt.Errorf("%s document %d: %q is not a kind this test knows", p, i, kind)
			}
			v := mk()
			dec := json.NewDecoder(bytes.NewReader(j))
			dec.DisallowUnknownFields()
			if err := dec.Decode(v); err != nil {
				return fmt.Errorf("%s document %d (%s): %w", p, i, kind, err)
			}
			objs = append(objs, object{file: p, kind: tm.Kind, v: v})
		}
		return nil
	})
	return objs, err
}

func TestDecodeStrict(t *testing.T) {
	// The decoder refuses what a typo would produce.
	dir := t.TempDir()
	for name, text := range map[string]string{
		"unknown-field.yaml": "apiVersion: v1\nkind: Service\nmetadata:\n  name: a\nspec:\n  selectr: {}\n",
		"duplicate.yaml":     "apiVersion: v1\nkind: Service\nmetadata:\n  name: a\n  name: b\n",
		"unknown-kind.yaml":  "apiVersion: v1\nkind: Servic\nmetadata:\n  name: a\n",
		"wrong-type.yaml":    "apiVersion: apps/v1\nkind: Deployment\nspec:\n  replicas: two\n",
	} {
		sub := filepath.Join(dir, strings.TrimSuffix(name, ".yaml"))
		os.Mkdir(sub, 0o755)
		os.WriteFile(filepath.Join(sub, name), []byte(text), 0o644)
		if _, err := decode(sub); err == nil {
			t.Errorf("%s: decoded without an error:\n%s", name, text)
		}
	}
}

// TestManifests checks the objects under deploy/ against each other. The
// two Deployments are alternatives (deployment.yaml, or gpu/deployment.yaml
// in its place): each is checked against the shared objects.
func TestManifests(t *testing.T) {
	objs, err := decode(".")
	if err != nil {
		t.Fatal(err)
	}
	var deps []object
	byName := map[string]any{}
	for _, o := range objs {
		name := o.v.(metav1.Object).GetName()
		if o.kind == "Deployment" {
			deps = append(deps, o)
			continue
		}
		key := o.kind + "/" + name
		if _, dup := byName[key]; dup {
			t.Errorf("%s: a second %s", o.file, key)
		}
		byName[key] = o.v
	}
	if len(deps) != 2 {
		t.Fatalf("want the CPU and the GPU Deployment, found %d", len(deps))
	}
	for _, want := range []string{"ConfigMap/zrt-config", "PersistentVolumeClaim/zrt-models", "PersistentVolumeClaim/zrt-cache",
		"Service/zrt", "InferencePool/zrt", "InferenceObjective/interactive", "HTTPRoute/zrt"} {
		if byName[want] == nil {
			t.Errorf("no %s under deploy/", want)
		}
	}
	for _, d := range deps {
		t.Run(d.file, func(t *testing.T) { checkDeployment(t, d.v.(*appsv1.Deployment), byName) })
	}
	pool, _ := byName["InferencePool/zrt"].(*inferencev1.InferencePool)
	for key, v := range byName {
		switch o := v.(type) {
		case *objectivev1alpha2.InferenceObjective:
			if pool == nil || string(o.Spec.PoolRef.Name) != pool.Name || string(o.Spec.PoolRef.Group) != inferencev1.GroupName || o.Spec.Priority == nil {
				t.Errorf("%s: poolRef %+v, priority %v: want the pool %s of group %s and a priority", key, o.Spec.PoolRef, o.Spec.Priority, "zrt", inferencev1.GroupName)
			}
		case *gatewayv1.HTTPRoute:
			n := 0
			for _, r := range o.Spec.Rules {
				for _, b := range r.BackendRefs {
					n++
					if pool == nil || b.Group == nil || string(*b.Group) != inferencev1.GroupName || b.Kind == nil || *b.Kind != "InferencePool" || string(b.Name) != pool.Name {
						t.Errorf("%s: a backendRef to %+v, not the InferencePool", key, b.BackendObjectReference)
					}
				}
			}
			if n == 0 {
				t.Errorf("%s routes to nothing", key)
			}
		}
	}
}

// checkDeployment checks one Deployment against the shared objects: the
// selectors of the Deployment, the Service and the pool all pick its pods;
// their ports are the container's; probes hit paths the server answers
// with 200; every volume exists; the server config in the ConfigMap
// loads; the build cache is the cache volume.
func checkDeployment(t *testing.T, d *appsv1.Deployment, objs map[string]any) {
	pod := labels.Set(d.Spec.Template.Labels)
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil || sel.Empty() || !sel.Matches(pod) {
		t.Errorf("the Deployment's selector %v (%v) does not pick its pods %v", d.Spec.Selector, err, pod)
	}
	if len(d.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("want one container, found %d", len(d.Spec.Template.Spec.Containers))
	}
	c := d.Spec.Template.Spec.Containers[0]
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	// The port zrt-run listens on is the container's http port.
	listen := flag(c.Args, "listen")
	if _, port, ok := strings.Cut(listen, ":"); !ok || port != fmt.Sprint(ports["http"]) {
		t.Errorf("--listen=%q, but the container's http port is %d", listen, ports["http"])
	}

	if svc, _ := objs["Service/zrt"].(*corev1.Service); svc != nil {
		if s := labels.SelectorFromSet(svc.Spec.Selector); len(svc.Spec.Selector) == 0 || !s.Matches(pod) {
			t.Errorf("Service selector %v does not pick the pods %v", svc.Spec.Selector, pod)
		}
		for _, p := range svc.Spec.Ports {
			if _, ok := ports[p.TargetPort.String()]; !ok && p.TargetPort.IntVal == 0 {
				t.Errorf("Service port %s targets %q, no port of the container", p.Name, p.TargetPort.String())
			}
		}
	}
	if pool, _ := objs["InferencePool/zrt"].(*inferencev1.InferencePool); pool != nil {
		set := labels.Set{}
		for k, v := range pool.Spec.Selector.MatchLabels {
			set[string(k)] = string(v)
		}
		if len(set) == 0 || !labels.SelectorFromSet(set).Matches(pod) {
			t.Errorf("InferencePool selector %v does not pick the pods %v", set, pod)
		}
		for _, p := range pool.Spec.TargetPorts {
			if int32(p.Number) != ports["http"] {
				t.Errorf("InferencePool targets port %d, the container serves on %d", p.Number, ports["http"])
			}
		}
	}

	// Probes: on the http port, at paths the server answers with 200.
	srv := httptest.NewServer(emptyServer(t).Handler())
	defer srv.Close()
	for name, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("no HTTP %s probe", name)
			continue
		}
		if p.HTTPGet.Port.String() != "http" {
			t.Errorf("%s probe on port %q, not http", name, p.HTTPGet.Port.String())
		}
		resp, err := http.Get(srv.URL + p.HTTPGet.Path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s probe path %s: the server answers %s", name, p.HTTPGet.Path, resp.Status)
		}
	}

	// Volumes and where they are mounted.
	vols := map[string]corev1.Volume{}
	for _, v := range d.Spec.Template.Spec.Volumes {
		vols[v.Name] = v
	}
	mounts := map[string]string{} // volume name -> mount path
	for _, m := range c.VolumeMounts {
		v, ok := vols[m.Name]
		if !ok {
			t.Errorf("mount %s names no volume", m.Name)
			continue
		}
		mounts[m.Name] = m.MountPath
		switch {
		case v.PersistentVolumeClaim != nil:
			if objs["PersistentVolumeClaim/"+v.PersistentVolumeClaim.ClaimName] == nil {
				t.Errorf("volume %s: no claim %s under deploy/", m.Name, v.PersistentVolumeClaim.ClaimName)
			}
		case v.ConfigMap != nil:
			if objs["ConfigMap/"+v.ConfigMap.Name] == nil {
				t.Errorf("volume %s: no ConfigMap %s under deploy/", m.Name, v.ConfigMap.Name)
			}
		}
	}
	if len(c.Args) < 2 || c.Args[0] != "serve" || !under(c.Args[1], mounts["models"]) {
		t.Errorf("args %q: want serve with a model under the models volume (%s)", c.Args, mounts["models"])
	}
	cache := ""
	for _, e := range c.Env {
		if e.Name == "ZRTC_CACHE" {
			cache = e.Value
		}
	}
	if cache == "" || cache != mounts["cache"] || vols["cache"].PersistentVolumeClaim == nil {
		t.Errorf("ZRTC_CACHE=%q, the cache volume is mounted at %q: the build cache must be the claim, or every start rebuilds", cache, mounts["cache"])
	}
	if m := mounts["cache"]; slices.ContainsFunc(c.VolumeMounts, func(v corev1.VolumeMount) bool { return v.Name == "cache" && v.ReadOnly }) {
		t.Errorf("the cache at %s is mounted read-only", m)
	}

	// The server config: the file --config names, from the ConfigMap the
	// config volume mounts, loads as zrt-run would load it.
	cfgPath := flag(c.Args, "config")
	cm, _ := objs["ConfigMap/"+vols["config"].ConfigMap.Name].(*corev1.ConfigMap)
	if cm == nil || !under(cfgPath, mounts["config"]) {
		t.Fatalf("--config=%q is not in the mounted ConfigMap (%s)", cfgPath, mounts["config"])
	}
	text, ok := cm.Data[path.Base(cfgPath)]
	if !ok {
		t.Fatalf("ConfigMap %s has no %s", cm.Name, path.Base(cfgPath))
	}
	f := filepath.Join(t.TempDir(), "server.toml")
	if err := os.WriteFile(f, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := server.LoadConfig(f); err != nil {
		t.Errorf("ConfigMap %s: %v", cm.Name, err)
	}

	// The image's user: no root, as the image is built (docs/deploy.md).
	sc := d.Spec.Template.Spec.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
		t.Errorf("the pod may run as root: %+v", sc)
	}
}

// flag is the value of --name=VALUE or --name VALUE in args.
func flag(args []string, name string) string {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
		if a == "--"+name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// under reports whether p lies inside the directory dir.
func under(p, dir string) bool {
	return dir != "" && strings.HasPrefix(path.Clean(p), path.Clean(dir)+"/")
}

// emptyServer is a server with no models, for the routes every server
// has.
func emptyServer(t *testing.T) *server.Server {
	cfg, err := server.LoadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	return server.New(cfg, server.NewPolicy(cfg), nil, nil, nil)
}
