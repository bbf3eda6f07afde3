import Logging
import RoundupIngress
import RoundupRuntime

await RoundupProcess.main(label: "roundup.ingress", failure: "ingress failed", run: IngressApplication.run(configuration:registry:logger:))
