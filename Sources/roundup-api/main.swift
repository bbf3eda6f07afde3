import Logging
import RoundupAPI
import RoundupRuntime

await RoundupProcess.main(label: "roundup.api", failure: "api failed", run: APIApplication.run(configuration:registry:logger:))
