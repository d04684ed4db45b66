from .routes import RouteRegistry
from .server import NamesrvConfig, NameServer

__all__ = ['NameServer', 'NamesrvConfig', 'RouteRegistry']
