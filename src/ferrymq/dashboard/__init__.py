"""The web dashboard (`ferrymq dashboard`): an HTTP server on the asyncio loop serving a page
from the package's static folder and JSON endpoints fed by the admin client."""
