package charttest

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The certificates of the execution API and of /metrics (spec/http-api.md, "TLS";
// spec/authentication.md, "Metrics"): mounted from a Secret, or issued by cert-manager
// Certificates the chart renders, and verified by the ServiceMonitor.

// TestRuntimeTLS: service.tls.existingSecret serves the execution API over HTTPS with the
// Secret's key pair, mounted as a directory (so the kubelet updates it in place and the
// runtime reloads it); the Service, its port and the notes say https.
func TestRuntimeTLS(t *testing.T) {
	t.Parallel()
	opts := set("service.tls.existingSecret=api-tls")
	objs := render(t, opts)
	var d deployment
	decode(t, find(t, objs, "Deployment", DefaultRelease), &d)
	pod := d.Spec.Template.Spec
	ctr := pod.Containers[0]
	for _, want := range []string{"--tls-cert-file=/etc/switchboard/tls/tls.crt", "--tls-key-file=/etc/switchboard/tls/tls.key"} {
		if !slices.Contains(ctr.Args, want) {
			t.Errorf("args lack %s: %q", want, ctr.Args)
		}
	}
	checkSecretMount(t, pod, "runtime-tls", "/etc/switchboard/tls", "api-tls", "tls.crt", "tls.key")
	if !slices.Contains(ctr.Ports, containerPort{Name: "https", ContainerPort: 8080}) {
		t.Errorf("container ports %+v: want 8080 named https", ctr.Ports)
	}
	var svc service
	decode(t, find(t, objs, "Service", DefaultRelease), &svc)
	if want := []servicePort{{Name: "https", Port: 8080, TargetPort: "https", AppProtocol: "https"}}; !cmp.Equal(svc.Spec.Ports, want) {
		t.Errorf("Service ports %+v, want %+v", svc.Spec.Ports, want)
	}
	notes, err := Notes(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"https://switchboard.switchboard-system.svc:8080", "https://localhost:8080"} {
		if !strings.Contains(notes, want) {
			t.Errorf("NOTES lack %q:\n%s", want, notes)
		}
	}

	// Without it, plain HTTP as before.
	d = renderDeployment(t, Options{})
	if slices.ContainsFunc(d.Spec.Template.Spec.Containers[0].Args, func(a string) bool { return strings.HasPrefix(a, "--tls-") }) {
		t.Errorf("TLS flags without service.tls: %q", d.Spec.Template.Spec.Containers[0].Args)
	}
}

// TestMetricsCertificate: metrics.tls.existingSecret reaches the metrics server as
// --metrics-cert-path, where the Secret is mounted, as kubebuilder's chart does.
func TestMetricsCertificate(t *testing.T) {
	t.Parallel()
	d := renderDeployment(t, set("metrics.tls.existingSecret=metrics-cert"))
	pod := d.Spec.Template.Spec
	if !slices.Contains(pod.Containers[0].Args, "--metrics-cert-path=/tmp/k8s-metrics-server/metrics-certs") {
		t.Errorf("args lack --metrics-cert-path: %q", pod.Containers[0].Args)
	}
	checkSecretMount(t, pod, "metrics-cert", "/tmp/k8s-metrics-server/metrics-certs", "metrics-cert", "tls.crt", "tls.key")
}

// TestCertManager: certManager.enabled renders a Certificate for the execution API and one
// for /metrics, for their Services' DNS names, issued by a self-signed Issuer of the
// chart or by the issuer named; the runtime serves both, and the ServiceMonitor verifies
// /metrics with the Certificate's CA.
func TestCertManager(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		set    []string
		issuer issuerRef
	}{
		{"self-signed", nil, issuerRef{Name: "switchboard-selfsigned", Kind: "Issuer", Group: "cert-manager.io"}},
		{"a ClusterIssuer", []string{"certManager.issuerRef.name=corp-ca", "certManager.issuerRef.kind=ClusterIssuer"},
			issuerRef{Name: "corp-ca", Kind: "ClusterIssuer", Group: "cert-manager.io"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			objs := render(t, set(append([]string{"certManager.enabled=true", "serviceMonitor.enabled=true"}, tc.set...)...))
			if issuers := kinds(objs, "Issuer"); (len(issuers) == 1) != (tc.issuer.Kind == "Issuer") {
				t.Errorf("%d Issuers rendered", len(issuers))
			}
			ns := DefaultNamespace
			for name, want := range map[string]certificateSpec{
				"switchboard-runtime-tls": {SecretName: "switchboard-runtime-tls", IssuerRef: tc.issuer, DNSNames: []string{
					"switchboard", "switchboard." + ns, "switchboard." + ns + ".svc", "switchboard." + ns + ".svc.cluster.local"}},
				"switchboard-metrics-tls": {SecretName: "switchboard-metrics-tls", IssuerRef: tc.issuer, DNSNames: []string{
					"switchboard-metrics." + ns + ".svc", "switchboard-metrics." + ns + ".svc.cluster.local"}},
			} {
				var c certificate
				decode(t, find(t, objs, "Certificate", name), &c)
				if diff := cmp.Diff(want, c.Spec); diff != "" {
					t.Errorf("Certificate %s (-want +got):\n%s", name, diff)
				}
			}
			var d deployment
			decode(t, find(t, objs, "Deployment", DefaultRelease), &d)
			checkSecretMount(t, d.Spec.Template.Spec, "runtime-tls", "/etc/switchboard/tls", "switchboard-runtime-tls", "tls.crt", "tls.key")
			checkSecretMount(t, d.Spec.Template.Spec, "metrics-cert", "/tmp/k8s-metrics-server/metrics-certs", "switchboard-metrics-tls", "tls.crt", "tls.key")
			checkMonitorTLS(t, objs, tlsConfig{ServerName: "switchboard-metrics." + ns + ".svc",
				CA: &secretSelector{Secret: secretKeySelector{Name: "switchboard-metrics-tls", Key: "ca.crt"}}})
		})
	}
	// A Secret named for one of them takes precedence over its Certificate.
	objs := render(t, set("certManager.enabled=true", "service.tls.existingSecret=api-tls"))
	if got := kinds(objs, "Certificate"); len(got) != 1 || got[0].Name != "switchboard-metrics-tls" {
		t.Errorf("Certificates with service.tls.existingSecret: %v", got)
	}
}

// TestServiceMonitorTLS: the ServiceMonitor verifies the metrics certificate with the CA
// of its Secret when one is configured, and skips verification only for the self-signed
// default, unless told otherwise.
func TestServiceMonitorTLS(t *testing.T) {
	t.Parallel()
	server := "switchboard-metrics." + DefaultNamespace + ".svc"
	for _, tc := range []struct {
		name string
		set  []string
		want tlsConfig
	}{
		{"self-signed", nil, tlsConfig{ServerName: server, InsecureSkipVerify: true}},
		{"a certificate Secret", []string{"metrics.tls.existingSecret=metrics-cert"},
			tlsConfig{ServerName: server, CA: &secretSelector{Secret: secretKeySelector{Name: "metrics-cert", Key: "ca.crt"}}}},
		{"a CA of its own", []string{"metrics.tls.existingSecret=metrics-cert", "serviceMonitor.tlsConfig.caSecretName=corp-ca",
			"serviceMonitor.tlsConfig.caSecretKey=root.pem", "serviceMonitor.tlsConfig.serverName=metrics.example"},
			tlsConfig{ServerName: "metrics.example", CA: &secretSelector{Secret: secretKeySelector{Name: "corp-ca", Key: "root.pem"}}}},
		{"verification skipped on request", []string{"metrics.tls.existingSecret=metrics-cert", "serviceMonitor.tlsConfig.insecureSkipVerify=true"},
			tlsConfig{ServerName: server, InsecureSkipVerify: true, CA: &secretSelector{Secret: secretKeySelector{Name: "metrics-cert", Key: "ca.crt"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			checkMonitorTLS(t, render(t, set(append([]string{"serviceMonitor.enabled=true"}, tc.set...)...)), tc.want)
		})
	}
}

// TestTLSValuesRefused: values that cannot work are refused before anything is rendered.
func TestTLSValuesRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		set  []string
		want string
	}{
		{"an issuer kind of no kind", []string{"certManager.enabled=true", "certManager.issuerRef.kind=Vault"}, "'/certManager/issuerRef/kind'"},
		{"an invalid Secret name", []string{"service.tls.existingSecret=API_TLS"}, "'/service/tls/existingSecret'"},
		{"a metrics certificate without TLS", []string{"metrics.tls.existingSecret=metrics-cert", "metrics.secure=false"}, "metrics.tls.existingSecret: needs metrics.secure"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := Render(t.Context(), set(tc.set...)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error mentioning %q, got %v", tc.want, err)
			}
		})
	}
}

// checkSecretMount checks that the pod mounts Secret secret as volume name at path, with
// the keys given, read-only.
func checkSecretMount(t *testing.T, pod podSpec, name, path, secret string, keys ...string) {
	t.Helper()
	i := slices.IndexFunc(pod.Volumes, func(v volume) bool { return v.Name == name })
	if i < 0 || pod.Volumes[i].Secret == nil || pod.Volumes[i].Secret.SecretName != secret {
		t.Errorf("no volume %s of Secret %s: %+v", name, secret, pod.Volumes)
		return
	}
	var got []string
	for _, item := range pod.Volumes[i].Secret.Items {
		got = append(got, item.Key)
	}
	if !slices.Equal(got, keys) {
		t.Errorf("volume %s holds %q, want %q", name, got, keys)
	}
	if !slices.Contains(pod.Containers[0].VolumeMounts, volumeMount{Name: name, MountPath: path, ReadOnly: true}) {
		t.Errorf("volume %s not mounted read-only at %s: %+v", name, path, pod.Containers[0].VolumeMounts)
	}
}

// checkMonitorTLS checks the tlsConfig of the ServiceMonitor's endpoint.
func checkMonitorTLS(t *testing.T, objs []Object, want tlsConfig) {
	t.Helper()
	var sm struct {
		Spec struct {
			Endpoints []struct {
				Scheme    string    `json:"scheme"`
				TLSConfig tlsConfig `json:"tlsConfig"`
			} `json:"endpoints"`
		} `json:"spec"`
	}
	decode(t, find(t, objs, "ServiceMonitor", DefaultRelease), &sm)
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Scheme != "https" {
		t.Fatalf("ServiceMonitor endpoints %+v: want one over https", sm.Spec.Endpoints)
	}
	if diff := cmp.Diff(want, sm.Spec.Endpoints[0].TLSConfig); diff != "" {
		t.Errorf("ServiceMonitor tlsConfig (-want +got):\n%s", diff)
	}
}

// The parts of Services, Certificates and ServiceMonitors the tests read.
type (
	service struct {
		Spec struct {
			Ports []servicePort `json:"ports"`
		} `json:"spec"`
	}
	servicePort struct {
		Name        string `json:"name"`
		Port        int    `json:"port"`
		TargetPort  string `json:"targetPort"`
		AppProtocol string `json:"appProtocol,omitempty"`
	}
	certificate struct {
		Spec certificateSpec `json:"spec"`
	}
	certificateSpec struct {
		SecretName string    `json:"secretName"`
		DNSNames   []string  `json:"dnsNames"`
		IssuerRef  issuerRef `json:"issuerRef"`
	}
	issuerRef struct {
		Name  string `json:"name"`
		Kind  string `json:"kind"`
		Group string `json:"group"`
	}
	tlsConfig struct {
		ServerName         string          `json:"serverName"`
		InsecureSkipVerify bool            `json:"insecureSkipVerify"`
		CA                 *secretSelector `json:"ca,omitempty"`
	}
	secretSelector struct {
		Secret secretKeySelector `json:"secret"`
	}
	secretKeySelector struct {
		Name string `json:"name"`
		Key  string `json:"key"`
	}
)
