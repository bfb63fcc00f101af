package cloudprovider

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// PythonEnv names the Python interpreter (the project's venv) that runs the localcluster
// package; the environment also carries PYTHONPATH, DT_RUN and DT_CACHE to it.
const PythonEnv = "LOCALCLUSTER_PYTHON"

// Launch is what `python -m localcluster nodeclaim launch` reads on stdin: the node to
// start for one NodeClaim. The kubelet reserves the host's capacity beyond Capacity,
// plus the overhead, so the Node's allocatable is Allocatable.
type Launch struct {
	Name              string              `json:"name"`
	ProviderID        string              `json:"providerID"`
	InstanceType      string              `json:"instanceType"`
	Labels            map[string]string   `json:"labels"`
	Taints            []corev1.Taint      `json:"taints"`
	Capacity          corev1.ResourceList `json:"capacity"`
	Allocatable       corev1.ResourceList `json:"allocatable"`
	KubeReserved      corev1.ResourceList `json:"kubeReserved"`
	SystemReserved    corev1.ResourceList `json:"systemReserved"`
	EvictionThreshold corev1.ResourceList `json:"evictionThreshold"`
	BootDelaySeconds  float64             `json:"bootDelaySeconds"`
}

// Instance is a launched node, as `nodeclaim launch` and `nodeclaim list` print it.
type Instance struct {
	Launch
	LaunchedAt time.Time `json:"launchedAt"`
}

// LocalNodes runs `python -m localcluster nodeclaim launch|delete|list`.
type LocalNodes struct {
	python string
}

func NewLocalNodesFromEnv() (*LocalNodes, error) {
	python := os.Getenv(PythonEnv)
	if python == "" {
		return nil, fmt.Errorf("%s is not set: the Python that runs `python -m localcluster`", PythonEnv)
	}
	return &LocalNodes{python: python}, nil
}

func (n *LocalNodes) Launch(ctx context.Context, launch Launch) (*Instance, error) {
	input, err := json.Marshal(launch)
	if err != nil {
		return nil, err
	}
	output, err := n.run(ctx, input, "launch")
	if err != nil {
		return nil, err
	}
	instance := &Instance{}
	if err := json.Unmarshal(output, instance); err != nil {
		return nil, fmt.Errorf("reading the launched instance, %w", err)
	}
	return instance, nil
}

func (n *LocalNodes) Delete(ctx context.Context, name string) error {
	_, err := n.run(ctx, nil, "delete", name)
	return err
}

func (n *LocalNodes) List(ctx context.Context) ([]*Instance, error) {
	output, err := n.run(ctx, nil, "list")
	if err != nil {
		return nil, err
	}
	var instances []*Instance
	if err := json.Unmarshal(output, &instances); err != nil {
		return nil, fmt.Errorf("reading the instances, %w", err)
	}
	return instances, nil
}

// run: JSON on stdout; the CLI's log goes to this process's stderr (Karpenter's log) and,
// on failure, into the error.
func (n *LocalNodes) run(ctx context.Context, stdin []byte, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, n.python, append([]string{"-m", "localcluster", "nodeclaim"}, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = io.MultiWriter(os.Stderr, &stderr)
	output, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("localcluster nodeclaim %s: %w: %s", strings.Join(args, " "), err, lastLines(stderr.String(), 5))
	}
	return output, nil
}

func lastLines(text string, count int) string {
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if len(lines) > count {
		lines = lines[len(lines)-count:]
	}
	return strings.Join(lines, "\n")
}
