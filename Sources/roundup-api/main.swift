import Logging
import RoundupAPI
import RoundupCore

await RoundupProcess.main(label: "roundup.api", failure: "api failed", run: APIApplication.run(configuration:registry:logger:))
