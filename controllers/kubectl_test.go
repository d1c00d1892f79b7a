package controllers

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/switchboard-dev/switchboard/api/v1alpha1"
)

// What a person inspecting models sees: the built kubectl against the envtest API server.

// kubectl runs the kubectl built by hack/envtest-assets.sh with a kubeconfig for an admin
// user of the envtest API server.
func kubectl(args ...string) string {
	GinkgoHelper()
	user, err := testEnv.AddUser(envtest.User{Name: "inspector", Groups: []string{"system:masters"}}, nil)
	Expect(err).NotTo(HaveOccurred())
	kubeconfig, err := user.KubeConfig()
	Expect(err).NotTo(HaveOccurred())
	path := filepath.Join(GinkgoT().TempDir(), "kubeconfig")
	Expect(os.WriteFile(path, kubeconfig, 0o600)).To(Succeed())
	cmd := exec.Command(filepath.Join(testEnv.BinaryAssetsDirectory, "kubectl"), append([]string{"--kubeconfig", path}, args...)...)
	out, err := cmd.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), string(out))
	return string(out)
}

var _ = Describe("kubectl", func() {
	It("prints the ModelDeployment columns with their values", func() {
		ns := newNamespace()
		Expect(k8s.Create(suiteCtx, newSecret(ns, map[string]string{"api-key": "sk"}))).To(Succeed())
		md := newMD(ns, "vision", withCapabilities(v1alpha1.Capabilities{
			Input: []v1alpha1.InputModality{"text", "json", "image"}, Tools: true}))
		Expect(k8s.Create(suiteCtx, md)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(condition(fetch(g, md), v1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionTrue))
		}).Should(Succeed())

		lines := strings.Split(strings.TrimSpace(kubectl("get", "md", "-n", ns)), "\n")
		Expect(lines).To(HaveLen(2))
		Expect(strings.Fields(lines[0])).To(Equal([]string{"NAME", "PROVIDER", "MODEL", "INPUTS", "TOOLS", "READY", "AGE"}))
		row := strings.Fields(lines[1])
		Expect(row).To(HaveLen(7))
		Expect(row[:6]).To(Equal([]string{"vision", "openai", "gpt-4o-mini", "text,json,image", "true", "True"}))

		Expect(k8s.Create(suiteCtx, newPolicy(ns, "strict-tools", withToolsDisabled()))).To(Succeed())
		Eventually(func(g Gomega) {
			row := strings.Fields(strings.Split(strings.TrimSpace(kubectl("get", "md", "-n", ns)), "\n")[1])
			g.Expect(row[4]).To(Equal("false"))
		}).Should(Succeed())
		Eventually(func(g Gomega) {
			lines := strings.Split(strings.TrimSpace(kubectl("get", "cpol", "-n", ns)), "\n")
			g.Expect(strings.Fields(lines[0])).To(Equal([]string{"NAME", "TOOLS", "MATCHED", "READY", "AGE"}))
			g.Expect(strings.Fields(lines[1])[:4]).To(Equal([]string{"strict-tools", "Disabled", "1", "True"}))
		}).Should(Succeed())
	})

	It("explains the capabilities field from the API doc comments", func() {
		var out string
		// The API server publishes a new CRD's OpenAPI document shortly after it is created.
		Eventually(func(g Gomega) {
			out = strings.Join(strings.Fields(kubectl("explain", "modeldeployment.spec.capabilities")), " ")
			g.Expect(out).To(ContainSubstring("declares what this configured model accepts and produces"))
		}).Should(Succeed())
		for _, field := range []string{"input <[]string>", "output <[]string>", "tools <boolean>",
			"streaming <boolean>", "structuredOutput <boolean>"} {
			Expect(out).To(ContainSubstring(field))
		}
		Expect(out).To(ContainSubstring("Default false: requests with tool, tool_call or tool_result parts are never routed to it."))
	})
})
