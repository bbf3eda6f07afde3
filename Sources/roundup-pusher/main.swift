import Logging
import RoundupPush
import RoundupRuntime

await RoundupProcess.main(
    label: "roundup.pusher", failure: "pusher failed", configurationErrorsExit: true, run: PusherApplication.run(configuration:registry:logger:))
