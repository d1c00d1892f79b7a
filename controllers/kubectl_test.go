package controllers

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/switchboard-dev/switchboard/api/v1alpha1"
	"github.com/switchboard-dev/switchboard/runtime/budget"
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

	It("prints the pricing columns of a ModelDeployment with -o wide only", func() {
		ns := newNamespace()
		Expect(k8s.Create(suiteCtx, newSecret(ns, map[string]string{"api-key": "sk"}))).To(Succeed())
		md := newMD(ns, "priced", withPricing(contractPricing()), withMaxOutputTokens(4096))
		Expect(k8s.Create(suiteCtx, md)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(condition(fetch(g, md), v1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionTrue))
		}).Should(Succeed())

		lines := strings.Split(strings.TrimSpace(kubectl("get", "md", "-n", ns)), "\n")
		Expect(strings.Fields(lines[0])).To(Equal([]string{"NAME", "PROVIDER", "MODEL", "INPUTS", "TOOLS", "READY", "AGE"}))
		lines = strings.Split(strings.TrimSpace(kubectl("get", "md", "-n", ns, "-o", "wide")), "\n")
		Expect(lines).To(HaveLen(2))
		Expect(strings.Fields(lines[0])).To(Equal([]string{"NAME", "PROVIDER", "MODEL", "INPUTS", "TOOLS", "READY", "AGE",
			"CURRENCY", "IN/1M", "OUT/1M", "MAX-OUT"}))
		row := strings.Fields(lines[1])
		Expect(row).To(HaveLen(11))
		Expect(row[7:]).To(Equal([]string{"USD", "2.50", "10.00", "4096"}))
	})

	It("prints the Budget columns from its status", func() {
		ns := newNamespace()
		b := newBudget(ns, "search-team", contractBudget())
		Expect(k8s.Create(suiteCtx, b)).To(Succeed())
		lines := strings.Split(strings.TrimSpace(kubectl("get", "budget", "-n", ns)), "\n")
		Expect(strings.Fields(lines[0])).To(Equal([]string{"NAME", "WINDOW", "USED", "LIMIT", "PERCENT", "EXHAUSTED", "AGE"}))

		// The leader writes the status from the store's counters: a priced model the
		// Budget governs gives it its currency, and a reservation its use.
		Expect(k8s.Create(suiteCtx, newSecret(ns, map[string]string{"api-key": "sk-test"}))).To(Succeed())
		md := newMD(ns, "premium", withLabels("tier", "premium"), withPricing(contractPricing()), withMaxOutputTokens(4096))
		Expect(k8s.Create(suiteCtx, md)).To(Succeed())
		Eventually(func() bool { return inTable(md) }).Should(BeTrue())
		hold(b, "exe_kubectl_1", budget.UnitCost, 123_456_789)
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(suiteCtx, client.ObjectKeyFromObject(b), b)).To(Succeed())
			g.Expect(b.Status.Used).To(Equal("123.46 USD"))
		}, 15*time.Second).Should(Succeed())

		lines = strings.Split(strings.TrimSpace(kubectl("get", "budget", "-n", ns)), "\n")
		Expect(lines).To(HaveLen(2))
		Expect(strings.Fields(lines[0])).To(Equal([]string{"NAME", "WINDOW", "USED", "LIMIT", "PERCENT", "EXHAUSTED", "AGE"}))
		// Used and Limit hold a space ("123.46 USD"): 9 fields for 7 columns.
		row := strings.Fields(lines[1])
		Expect(row).To(HaveLen(9))
		Expect(row[:8]).To(Equal([]string{"search-team", "Month", "123.46", "USD", "500.00", "USD", "24", "False"}))
		// The category lists Budgets with the other kinds.
		Expect(kubectl("get", "switchboard", "-n", ns)).To(ContainSubstring("budget.ai.switchboard.dev/search-team"))
	})

	It("explains a Budget's limits and a ModelDeployment's pricing from the API doc comments", func() {
		var out string
		Eventually(func(g Gomega) {
			out = strings.Join(strings.Fields(kubectl("explain", "budget.spec.limits")), " ")
			g.Expect(out).To(ContainSubstring("limits are what may be used per window, 1 to 8 entries"))
		}).Should(Succeed())
		for _, field := range []string{"window <string> -required-", "timeZone <string>", "cost <string>",
			"tokens <integer>", "requests <integer>"} {
			Expect(out).To(ContainSubstring(field))
		}
		Expect(out).To(ContainSubstring("(ISO, from Monday) or Month (a calendar month)"))

		Eventually(func(g Gomega) {
			out = strings.Join(strings.Fields(kubectl("explain", "modeldeployment.spec.pricing")), " ")
			g.Expect(out).To(ContainSubstring("pricing is what the model costs, per 1,000,000 units in one currency"))
		}).Should(Succeed())
		Expect(out).To(ContainSubstring(`decimal strings such as "2.50", with no sign or exponent and at most 6 decimals`))
		for _, field := range []string{"currency <string> -required-", "inputTokens <string> -required-",
			"outputTokens <string> -required-", "cacheReadTokens <string>", "images <string>"} {
			Expect(out).To(ContainSubstring(field))
		}
		out = strings.Join(strings.Fields(kubectl("explain", "modeldeployment.spec.pricing.cacheReadTokens")), " ")
		Expect(out).To(ContainSubstring("Omitted: inputTokens."))
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
