package kubelet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// A pod's volumes are directories under the pod's directory (hostPath
// volumes are the node's own), written once when the pod starts:
// emptyDir, configMap, secret, downwardAPI, projected (service account
// tokens from the TokenRequest API, as a kubelet asks for them) and
// hostPath. The sandbox mounts them into the pod's root (sandbox.go); every
// container of the pod sees the union of its containers' mounts. Other
// volume types fail the pod's start with the volume and type named.

// mount is one volume mount of the pod's root.
type mount struct {
	target, source string
	readOnly       bool
}

// volumeDir is where the kubelet keeps the pod's volume name.
func (k *Kubelet) volumeDir(uid, name string) string {
	return filepath.Join(k.podDir(uid), "volumes", name)
}

// prepareVolumes writes the pod's volumes and returns the mounts of its
// containers, by target (the first container that mounts a path decides).
func (w *podWorker) prepareVolumes(ctx context.Context, pod *v1.Pod) ([]mount, error) {
	sources := map[string]string{}
	for _, vol := range pod.Spec.Volumes {
		src, err := w.prepareVolume(ctx, pod, vol)
		if err != nil {
			return nil, fmt.Errorf("volume %q: %w", vol.Name, err)
		}
		sources[vol.Name] = src
	}
	var mounts []mount
	seen := map[string]bool{}
	for _, c := range append(append([]v1.Container(nil), pod.Spec.InitContainers...), pod.Spec.Containers...) {
		for _, vm := range c.VolumeMounts {
			src, ok := sources[vm.Name]
			if !ok {
				return nil, fmt.Errorf("container %s mounts volume %q, which the pod does not have", c.Name, vm.Name)
			}
			if seen[vm.MountPath] {
				continue
			}
			seen[vm.MountPath] = true
			if vm.SubPath != "" {
				src = filepath.Join(src, filepath.Clean("/"+vm.SubPath))
				if err := os.MkdirAll(src, 0o777); err != nil {
					return nil, err
				}
			}
			mounts = append(mounts, mount{target: vm.MountPath, source: src, readOnly: vm.ReadOnly})
		}
	}
	return mounts, nil
}

// prepareVolume writes one volume and returns its source on the node.
func (w *podWorker) prepareVolume(ctx context.Context, pod *v1.Pod, vol v1.Volume) (string, error) {
	k := w.k
	dir := k.volumeDir(string(pod.UID), vol.Name)
	mkdir := func() error { return os.MkdirAll(dir, 0o777) }
	switch s := vol.VolumeSource; {
	case s.EmptyDir != nil:
		if err := mkdir(); err != nil {
			return "", err
		}
		return dir, os.Chmod(dir, 0o777)
	case s.HostPath != nil:
		p := s.HostPath.Path
		switch ptr.Deref(s.HostPath.Type, v1.HostPathUnset) {
		case v1.HostPathDirectoryOrCreate:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return "", err
			}
		case v1.HostPathFileOrCreate:
			f, err := os.OpenFile(p, os.O_CREATE|os.O_RDONLY, 0o644)
			if err != nil {
				return "", err
			}
			f.Close()
		case v1.HostPathUnset:
		default:
			if _, err := os.Stat(p); err != nil {
				return "", fmt.Errorf("hostPath %s: %w", p, err)
			}
		}
		return p, nil
	case s.ConfigMap != nil:
		files, err := k.configMapFiles(ctx, pod.Namespace, s.ConfigMap.Name, s.ConfigMap.Items, s.ConfigMap.Optional)
		if err != nil {
			return "", err
		}
		return dir, writeVolume(dir, files, s.ConfigMap.DefaultMode)
	case s.Secret != nil:
		files, err := k.secretFiles(ctx, pod.Namespace, s.Secret.SecretName, s.Secret.Items, s.Secret.Optional)
		if err != nil {
			return "", err
		}
		return dir, writeVolume(dir, files, s.Secret.DefaultMode)
	case s.DownwardAPI != nil:
		files, err := w.downwardFiles(pod, s.DownwardAPI.Items)
		if err != nil {
			return "", err
		}
		return dir, writeVolume(dir, files, s.DownwardAPI.DefaultMode)
	case s.Projected != nil:
		files := map[string]volumeFile{}
		for _, p := range s.Projected.Sources {
			var part map[string]volumeFile
			var err error
			switch {
			case p.ServiceAccountToken != nil:
				part, err = k.tokenFile(ctx, pod, p.ServiceAccountToken)
			case p.ConfigMap != nil:
				part, err = k.configMapFiles(ctx, pod.Namespace, p.ConfigMap.Name, p.ConfigMap.Items, p.ConfigMap.Optional)
			case p.Secret != nil:
				part, err = k.secretFiles(ctx, pod.Namespace, p.Secret.Name, p.Secret.Items, p.Secret.Optional)
			case p.DownwardAPI != nil:
				part, err = w.downwardFiles(pod, p.DownwardAPI.Items)
			default:
				err = fmt.Errorf("a projected source other than serviceAccountToken, configMap, secret and downwardAPI is not supported by the testbed kubelet")
			}
			if err != nil {
				return "", err
			}
			for name, f := range part {
				files[name] = f
			}
		}
		return dir, writeVolume(dir, files, s.Projected.DefaultMode)
	}
	return "", fmt.Errorf("its type is not supported by the testbed kubelet (emptyDir, hostPath, configMap, secret, downwardAPI and projected are)")
}

// refreshVolumes writes the pod's ConfigMap, Secret and downwardAPI
// volumes again, as a kubelet keeps them current: a changed key shows in
// the running containers.
func (w *podWorker) refreshVolumes(ctx context.Context, pod *v1.Pod) {
	for _, vol := range pod.Spec.Volumes {
		if vol.ConfigMap == nil && vol.Secret == nil && vol.DownwardAPI == nil {
			continue
		}
		if _, err := w.prepareVolume(ctx, pod, vol); err != nil {
			w.log.WithError(err).WithField("volume", vol.Name).Warn("refresh volume")
		}
	}
}

// checkStorage evicts the pod, as a kubelet does, when what it wrote (its
// root's own layer, its containers' logs and its emptyDir volumes) is more
// than the sum of its containers' ephemeral-storage limits. It reports
// whether it evicted the pod.
func (w *podWorker) checkStorage(pod *v1.Pod) bool {
	var limit int64
	for _, c := range pod.Spec.Containers {
		if q, ok := c.Resources.Limits[v1.ResourceEphemeralStorage]; ok {
			limit += q.Value()
		}
	}
	if limit == 0 {
		return false
	}
	dirs := []string{filepath.Join(w.k.podDir(string(pod.UID)), "rootfs", "upper")}
	for _, c := range pod.Spec.Containers {
		dirs = append(dirs, w.k.containerLogDir(pod, c.Name))
	}
	for _, v := range pod.Spec.Volumes {
		if v.EmptyDir != nil {
			dirs = append(dirs, w.k.volumeDir(string(pod.UID), v.Name))
		}
	}
	var used int64
	for _, d := range dirs {
		used += dirSize(d)
	}
	if used <= limit {
		return false
	}
	msg := fmt.Sprintf("Pod ephemeral local storage usage exceeds the total limit of containers %s.", resource.NewQuantity(limit, resource.BinarySI))
	w.log.WithField("used", used).Warn("evicting: " + msg)
	w.k.recorder.Eventf(pod, v1.EventTypeWarning, "Evicted", "%s", msg)
	w.mu.Lock()
	w.evicted = msg
	w.mu.Unlock()
	w.stopContainers(time.Second)
	return true
}

// dirSize is the size of the files below dir (0 if it is not there).
func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// volumeRefresh is how often refreshVolumes runs.
const volumeRefresh = 5 * time.Second

// volumeFile is one file of a volume.
type volumeFile struct {
	data []byte
	mode *int32
}

// writeVolume writes files (paths relative to dir) into dir.
func writeVolume(dir string, files map[string]volumeFile, defaultMode *int32) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		f := files[n]
		p := filepath.Join(dir, filepath.Clean("/"+n))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if m := f.mode; m != nil {
			mode = os.FileMode(*m)
		} else if defaultMode != nil {
			mode = os.FileMode(*defaultMode)
		}
		if cur, err := os.ReadFile(p); err == nil && string(cur) == string(f.data) {
			if err := os.Chmod(p, mode); err != nil {
				return err
			}
			continue
		}
		// A reader (CoreDNS reloading its Corefile) sees the old file or
		// the new one, never a part.
		tmp := filepath.Join(filepath.Dir(p), ".."+filepath.Base(p)+".tmp")
		if err := os.WriteFile(tmp, f.data, mode); err != nil {
			return err
		}
		if err := os.Chmod(tmp, mode); err != nil {
			return err
		}
		if err := os.Rename(tmp, p); err != nil {
			return err
		}
	}
	return nil
}

// keyFiles picks the files of a ConfigMap's or Secret's data: every key,
// or the items named.
func keyFiles(kind, name string, data map[string][]byte, items []v1.KeyToPath) (map[string]volumeFile, error) {
	out := map[string]volumeFile{}
	if len(items) == 0 {
		for key, v := range data {
			out[key] = volumeFile{data: v}
		}
		return out, nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			return nil, fmt.Errorf("%s %s has no key %q", kind, name, it.Key)
		}
		out[it.Path] = volumeFile{data: v, mode: it.Mode}
	}
	return out, nil
}

func (k *Kubelet) configMapFiles(ctx context.Context, ns, name string, items []v1.KeyToPath, optional *bool) (map[string]volumeFile, error) {
	cm, err := k.cfg.Client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && ptr.Deref(optional, false) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("configMap %s: %w", name, err)
	}
	data := map[string][]byte{}
	for key, v := range cm.Data {
		data[key] = []byte(v)
	}
	for key, v := range cm.BinaryData {
		data[key] = v
	}
	return keyFiles("configMap", name, data, items)
}

func (k *Kubelet) secretFiles(ctx context.Context, ns, name string, items []v1.KeyToPath, optional *bool) (map[string]volumeFile, error) {
	s, err := k.cfg.Client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && ptr.Deref(optional, false) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("secret %s: %w", name, err)
	}
	return keyFiles("secret", name, s.Data, items)
}

// downwardFiles are a downwardAPI volume's files.
func (w *podWorker) downwardFiles(pod *v1.Pod, items []v1.DownwardAPIVolumeFile) (map[string]volumeFile, error) {
	out := map[string]volumeFile{}
	for _, it := range items {
		var v string
		switch {
		case it.FieldRef != nil:
			switch p := it.FieldRef.FieldPath; p {
			case "metadata.labels":
				v = formatMap(pod.Labels)
			case "metadata.annotations":
				v = formatMap(pod.Annotations)
			default:
				var err error
				if v, err = w.valueFrom(pod, &v1.EnvVarSource{FieldRef: it.FieldRef}); err != nil {
					return nil, err
				}
			}
		case it.ResourceFieldRef != nil:
			var err error
			if v, err = w.valueFrom(pod, &v1.EnvVarSource{ResourceFieldRef: it.ResourceFieldRef}); err != nil {
				return nil, err
			}
		}
		out[it.Path] = volumeFile{data: []byte(v), mode: it.Mode}
	}
	return out, nil
}

// formatMap writes labels or annotations as a kubelet does: key="value",
// one a line, sorted.
func formatMap(m map[string]string) string {
	lines := make([]string, 0, len(m))
	for k, v := range m {
		lines = append(lines, k+"="+strconv.Quote(v))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// tokenFile asks the API server for a token of the pod's service account,
// bound to the pod, as a kubelet does for a projected volume.
func (k *Kubelet) tokenFile(ctx context.Context, pod *v1.Pod, p *v1.ServiceAccountTokenProjection) (map[string]volumeFile, error) {
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: p.ExpirationSeconds,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	if p.Audience != "" {
		req.Spec.Audiences = []string{p.Audience}
	}
	tr, err := k.cfg.Client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("token of service account %s: %w", sa, err)
	}
	return map[string]volumeFile{p.Path: {data: []byte(tr.Status.Token)}}, nil
}
